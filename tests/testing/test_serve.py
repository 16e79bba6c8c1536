"""bake.testing.serve: bake.serve parsed strictly, naming the line; the built-ins without it."""

from __future__ import annotations

import pytest

from bake.testing.serve import ServeError, legacy_serve, parse_serve

SUM = "0" * 64

SERVE = (
    "# bake serve v1\n"
    "loc\ts3tokenizer.0\ts3tokenizer\tunder\tXDG_CACHE_HOME\ts3tokenizer\t$HOME/.cache\n"
    "loc\thub.xdg\t-\tunder\tXDG_CACHE_HOME\thuggingface\t$HOME/.cache\n"
    "loc\thub.0\thub\tunder\tHF_HUB_CACHE\t\t@hub.xdg\n"
    f"set\ts3tokenizer\t{SUM}\t12\t.bake\ts3tokenizer\ts3tokenizer/m.onnx\n"
    f"set\thub\t{SUM}\t3\t.locks/.bake\thub\thub/models--o--r\n"
    "dir\ts3tokenizer\tboth\t.\n"
    "place\ts3tokenizer\tlink\ts3tokenizer/m.onnx\tm.onnx\n"
    f"file\ts3tokenizer\tboth\tm.onnx\t12\t{SUM}\n"
    f"file\thub\tboth\tmodels--o--r/blobs/e\t3\t{SUM}\n"
    "link\thub\tmodels--o--r/snapshots/c0ffee/config.json\t../../blobs/e\n"
)


def test_parse_serve_reads_every_record_kind() -> None:
    serve = parse_serve(SERVE)
    assert [loc.id for loc in serve.served()] == ["s3tokenizer.0", "hub.0"]
    assert serve.locations[0].describe() == "${XDG_CACHE_HOME:-$HOME/.cache}/s3tokenizer"
    assert serve.files[1].size == 3 and serve.links[0].target == "../../blobs/e"


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("loc\tx\n", "line 1"),
        (
            "# bake serve v1\nsymlink\ta\tb\n",
            "bake.serve:2: expected a loc, set, dir, place, skip, file or link",
        ),
        ("# bake serve v1\nlink\ta\tb\n", "bake.serve:2: expected 4 tab-separated fields, saw 3"),
        (
            f"# bake serve v1\nfile\tnowhere\tboth\tb\t1\t{SUM}\n",
            "expected a CONSUMER with a set record above",
        ),
        (SERVE.replace("\t12\t0", "\ttwelve\t0"), "expected SIZE in bytes, saw 'twelve'"),
    ],
)
def test_parse_serve_refuses_what_it_does_not_know(text: str, named: str) -> None:
    with pytest.raises(ServeError, match=named.replace("[", r"\[").replace("$", r"\$")):
        parse_serve(text)


def test_legacy_serve_is_the_built_ins_for_the_locks_assets() -> None:
    serve = legacy_serve(
        [
            {"path": "tiktoken/abc", "size": 5, "sha256": "0" * 64},
            {"path": "whisper/x.pt", "size": 1, "sha256": "1" * 64},
        ]
    )
    assert [loc.describe() for loc in serve.locations] == ["$TIKTOKEN_RS_CACHE_DIR", "$TIKTOKEN_CACHE_DIR"]
    assert {f.asset for f in serve.files} == {"tiktoken/abc"}
