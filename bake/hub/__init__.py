"""Hugging Face Hub repositories: adding one to a manifest, downloading, and the Hub's cache layout."""
