"""bake.consumers.entries: the table itself, its built-ins' data and declared consumers read back."""

from __future__ import annotations

from bake import consumers
from tests.consumers.conftest import NLTK, WHISPER


def test_builtins_are_the_contracts_shape() -> None:
    assert {c.name: [str(loc) for loc in c.locations] for c in consumers.BUILTINS} == {
        "s3tokenizer": ["${XDG_CACHE_HOME:-$HOME/.cache}/s3tokenizer"],
        "tiktoken": ["$TIKTOKEN_RS_CACHE_DIR", "$TIKTOKEN_CACHE_DIR"],
        # huggingface_hub's own precedence, one fallback inside the next.
        "hub": [
            "${HF_HUB_CACHE:-${HUGGINGFACE_HUB_CACHE:-${HF_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/huggingface}/hub}}"
        ],
        # vLLM's envs.py and base.py (tests/consumers/test_vllm_assets.py checks it against a release).
        "vllm_public_assets": [
            "${VLLM_ASSETS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/vllm/assets}/vllm_public_assets"
        ],
    }


def test_declared_consumers_come_back_from_bake_serve(declared) -> None:
    _, files = declared
    text = consumers.serve_text(consumers.table([NLTK, WHISPER]), files)
    back = consumers.declared_from_serve(text)
    assert [(c.name, [str(loc) for loc in c.locations]) for c in back] == [
        ("nltk", ["$NLTK_DATA"]),
        ("whisper", ["${XDG_CACHE_HOME:-$HOME/.cache}/whisper"]),
    ]
