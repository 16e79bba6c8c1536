"""Tests of bake add's Hub modules, one per module of bake/add/; the command itself: tests/test_add.py."""
