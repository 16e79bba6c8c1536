"""Hugging Face Hub repositories as assets: schema, add, download and the Hub's cache layout."""
