"""Tests of the Hub's bottom layer, one module per module of bake/hub/."""
