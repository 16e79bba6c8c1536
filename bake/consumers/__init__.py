"""The consumer table: each library that looks for baked files in its own places, and what bake does for it.

A consumer owns the assets under ``<name>/``. The package keeps each job in its own module,
each importing only those before it:

- ``libraries``: the installed libraries' own tables (s3tokenizer's models, tiktoken's vocab
  hashes), read from their source once per process; ``vllm_assets``: what an installed vLLM
  says of its assets;
- ``naming``: each built-in's naming rule (manifest paths, ``bake add``, alias links, harvest);
- ``serve``: each consumer's records of ``bake.serve``;
- ``entries``: the table itself, one entry of data per consumer (the built-ins are s3tokenizer,
  the tiktoken family, the Hugging Face Hub and vLLM's public test assets; a manifest declares
  more with ``[[consumer]]``);
- ``checks``: doctor's checks of a job's lookups and manifest check's of an entry.

Everything else in bake (manifest rules, seal, verify, doctor, manifest check, ``bake add``,
``bake harvest``) and, through ``bake.serve``, the entrypoint reads the table through the
names below.
"""

from bake.consumers.checks import NOT_INSTALLED, Finding, check_manifest, doctor, not_asked
from bake.consumers.entries import (
    BUILTINS,
    HUB_CACHE,
    HUB_CHAIN_IDS,
    VLLM_ASSETS_CACHE,
    Consumer,
    Hub,
    S3Tokenizer,
    Tiktoken,
    VllmAssets,
    declared_from_serve,
    owner,
    parse_consumer,
    table,
)
from bake.consumers.libraries import installed, s3tokenizer_models, tiktoken_hashes
from bake.consumers.naming import AssetLike, sha1_name
from bake.consumers.serve import SERVE_HEADER, SERVE_NAME, STATE, BakedFile, serve_records, serve_text

__all__ = [
    "BUILTINS",
    "HUB_CACHE",
    "HUB_CHAIN_IDS",
    "NOT_INSTALLED",
    "SERVE_HEADER",
    "SERVE_NAME",
    "STATE",
    "VLLM_ASSETS_CACHE",
    "AssetLike",
    "BakedFile",
    "Consumer",
    "Finding",
    "Hub",
    "S3Tokenizer",
    "Tiktoken",
    "VllmAssets",
    "check_manifest",
    "declared_from_serve",
    "doctor",
    "installed",
    "not_asked",
    "owner",
    "parse_consumer",
    "s3tokenizer_models",
    "serve_records",
    "serve_text",
    "sha1_name",
    "table",
    "tiktoken_hashes",
]
