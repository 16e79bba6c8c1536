"""The baked assets the seed tests serve: an nltk consumer's two files among others, sealed by bake."""

from __future__ import annotations

from pathlib import Path

import pytest

from bake.seed import plan, seeder
from tests.serve import content, sealed

VOCAB = "fb374d419588a4632f3f557e76b4b70aebbca790"
FILES = {
    "s3tokenizer/speech_tokenizer_v3_25hz.onnx": content("v3", 3000),
    f"tiktoken/{VOCAB}": content("o200k", 1500),
    "nltk/corpora/tiny/words.txt": content("words", 900),
    "nltk/tokenizers/punkt.zip": content("punkt", 700),
}
URLS = {f"tiktoken/{VOCAB}": "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"}
DECLARED = {"nltk": "$NLTK_DATA"}


@pytest.fixture
def assets(tmp_path: Path) -> Path:
    return sealed(FILES, URLS, DECLARED)(tmp_path / "assets")


def request(assets: Path, location: Path, consumer: str = "nltk", **flags: bool) -> seeder.Request:
    return seeder.Request(location, plan.load(assets, consumer), assets, **flags)


def nltk_files(location: Path) -> dict[str, bytes]:
    return {
        name: (location / name).read_bytes()
        for name in ("corpora/tiny/words.txt", "tokenizers/punkt.zip")
        if (location / name).is_file()
    }
