"""Tests of bake.testing, the image-assertion plugin, one module per module of bake/testing/."""
