"""bake.consumers.naming: the path each built-in's library looks for, given a URL."""

from __future__ import annotations

import hashlib

import pytest

from bake import consumers
from bake.consumers import libraries
from bake.errors import ManifestError
from bake.manifest import parse_manifest
from tests.assets import O200K_URL as VOCAB_URL
from tests.hub.conftest import SHA

VOCAB_NAME = hashlib.sha1(VOCAB_URL.encode()).hexdigest()


@pytest.mark.parametrize(
    ("url", "path"),
    [
        pytest.param(VOCAB_URL, f"tiktoken/{VOCAB_NAME}", id="tiktoken"),
        pytest.param(
            "https://www.modelscope.cn/models/FunAudioLLM/Fun-CosyVoice3-0.5B-2512/resolve/master/speech_tokenizer_v3.onnx",
            "s3tokenizer/speech_tokenizer_v3_25hz.onnx",
            id="s3tokenizer",
        ),
        pytest.param("https://example.org/model.onnx", None, id="nobody"),
    ],
)
def test_naming_rules_give_bake_add_its_path(url: str, path: str | None) -> None:
    found = [p for c in consumers.BUILTINS if (p := c.path_for_url(url))]
    assert found == ([path] if path else [])


def test_s3tokenizer_naming_rule_needs_its_table(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(libraries, "s3tokenizer_models", lambda: None)
    url = "https://www.modelscope.cn/models/iic/CosyVoice2-0.5B/resolve/master/speech_tokenizer_v2.onnx"
    assert consumers.S3Tokenizer().path_for_url(url) is None


def test_an_asset_may_not_use_the_hub_prefix() -> None:
    text = f'[[asset]]\nname = "a"\npath = "hub/x"\nsha256 = "{SHA}"\nurls = ["https://example.org/x"]\n'
    with pytest.raises(ManifestError, match="kept for"):
        parse_manifest(text)
