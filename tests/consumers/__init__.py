"""Tests of the consumer table, one module per module of bake/consumers/."""
