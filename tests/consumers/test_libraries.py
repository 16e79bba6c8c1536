"""bake.consumers.libraries: the installed libraries' own tables, read from source without importing them.

These run against the real s3tokenizer (installed --no-deps) and tiktoken packages that the test
command installs.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bake import consumers, manifest
from bake.consumers import libraries
from tests.assets import O200K_URL as VOCAB_URL
from tests.runners import REPO


def test_s3tokenizer_models_are_read_without_running_the_module() -> None:
    probe = (
        "import sys, json; from bake import consumers; t = consumers.s3tokenizer_models(); "
        "print(json.dumps([t['speech_tokenizer_v3_25hz'], "
        "'s3tokenizer' in sys.modules, 'torch' in sys.modules]))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=REPO)
    entry, imported_s3, imported_torch = __import__("json").loads(out.stdout)
    assert entry == [
        "https://www.modelscope.cn/models/FunAudioLLM/Fun-CosyVoice3-0.5B-2512/resolve/master/speech_tokenizer_v3.onnx",
        "23236a74175dbdda47afc66dbadd5bcb41303c467a57c261cb8539ad9db9208d",
    ]
    assert (imported_s3, imported_torch) == (False, False)


def test_tiktoken_hashes_have_o200k() -> None:
    assert (
        consumers.tiktoken_hashes()[VOCAB_URL]
        == "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
    )


def test_each_library_table_is_read_once_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """manifest check asks s3tokenizer's and tiktoken's tables once per asset; each source is parsed once."""
    sources = {libraries.module_source("s3tokenizer"), libraries.module_source("tiktoken_ext.openai_public")}
    libraries.s3tokenizer_models.cache_clear()
    libraries.tiktoken_hashes.cache_clear()
    reads = []
    read_text = Path.read_text
    monkeypatch.setattr(
        Path, "read_text", lambda path, *a, **k: reads.append(path) or read_text(path, *a, **k)
    )
    findings = consumers.check_manifest(manifest.load_manifest(REPO / "tests/image/assets.toml"))
    assert [f.consumer for f in findings].count("s3tokenizer") == 2  # two models, one table
    assert sorted(map(str, (r for r in reads if r in sources))) == sorted(map(str, sources))
