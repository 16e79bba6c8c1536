"""The consumer table as a whole: no consumer's name outside it, and doctor and manifest check end to end.

The tests of each module of bake/consumers/ are in tests/consumers/. These run against the real
s3tokenizer (installed --no-deps), tiktoken and openai-harmony packages that the test command installs.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bake import consumers
from tests.assets import O200K_URL as VOCAB_URL
from tests.runners import REPO, bake

VOCAB_NAME = hashlib.sha1(VOCAB_URL.encode()).hexdigest()


def test_no_consumer_name_decides_behaviour_outside_the_table() -> None:
    """The done-criterion: outside bake/consumers/, the built-ins' names appear only in prose."""
    hits = []
    for module in sorted((REPO / "bake").rglob("*.py")):
        if module.parent.name == "consumers" or "_vendor" in module.parts:
            continue
        for number, line in enumerate(module.read_text(encoding="utf-8").splitlines(), 1):
            code = line.split("#", 1)[0]
            if ("s3tokenizer" in code or "tiktoken" in code) and not _is_prose(module, number):
                hits.append(f"{module.relative_to(REPO)}:{number}: {line.strip()}")
    assert hits == []


def _is_prose(module: Path, number: int) -> bool:
    """True when the line lies inside a docstring (module, class or function)."""
    import ast

    tree = ast.parse(module.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            doc = body[0].value
            if (
                isinstance(doc, ast.Constant)
                and isinstance(doc.value, str)
                and doc.lineno <= number <= doc.end_lineno
            ):
                return True
    return False


def test_manifest_json_lists_the_whole_table() -> None:
    out = bake("manifest", "--manifest", str(REPO / "tests/image/assets.toml"))
    assert out.returncode == 0, out.stderr
    table = {c["name"]: c for c in json.loads(out.stdout)["consumers"]}
    assert table["nltk"] == {"name": "nltk", "prefix": "nltk/", "builtin": False, "locations": ["$NLTK_DATA"]}
    assert table["tiktoken"]["locations"] == ["$TIKTOKEN_RS_CACHE_DIR", "$TIKTOKEN_CACHE_DIR"]


@pytest.mark.parametrize(("served", "code"), [(True, 0), (False, 3)])
def test_doctor_assets_dir_learns_declared_consumers_from_bake_serve(
    tmp_path: Path, served: bool, code: int
) -> None:
    words = b"a\nthe\n"
    src = tmp_path / "english"
    src.write_bytes(words)
    manifest_path = tmp_path / "assets.toml"
    manifest_path.write_text(
        '[[consumer]]\nname = "nltk"\nlocations = ["$NLTK_DATA"]\n\n'
        f'[[asset]]\nname = "stopwords"\npath = "nltk/corpora/stopwords/english"\n'
        f'sha256 = "{hashlib.sha256(words).hexdigest()}"\nurls = ["{src.as_uri()}"]\n'
    )
    dest = tmp_path / "assets"
    args = ("--manifest", str(manifest_path), "--dest", str(dest))
    assert bake("fetch", *args, "--cache-dir", str(tmp_path / "cache"), "-q").returncode == 0
    assert bake("seal", *args).returncode == 0
    data = tmp_path / "nltk_data"
    if served:
        (data / "corpora/stopwords").mkdir(parents=True)
        (data / "corpora/stopwords/english").symlink_to(dest / "nltk/corpora/stopwords/english")
    result = bake("doctor", "--assets", str(dest), env={"NLTK_DATA": str(data)})
    assert result.returncode == code, result.stdout + result.stderr
    assert f"{'ok' if served else 'WOULD DOWNLOAD'}  nltk  nltk/corpora/stopwords/english" in result.stdout
    for p in [dest, *dest.rglob("*")]:  # let pytest clean up
        if not p.is_symlink():
            p.chmod(0o755)


# -- doctor and manifest check agree (issue 37) ---------------------------------------------------------

CHECKPOINT = "s3tokenizer/speech_tokenizer_v3_25hz.onnx"


def _sealed(tmp_path: Path, vocab_url: str) -> tuple[Path, Path]:
    """A sealed root baking a checkpoint and the vocab of ``vocab_url``, both made-up bytes; its manifest."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "ckpt.onnx").write_bytes(b"a made-up checkpoint")
    (src / vocab_url.rsplit("/", 1)[1]).write_bytes(b"a made-up vocab")
    manifest_path = tmp_path / "assets.toml"
    manifest_path.write_text(
        f'[[asset]]\nname = "speech_tokenizer_v3_25hz"\npath = "{CHECKPOINT}"\n'
        f'sha256 = "{hashlib.sha256(b"a made-up checkpoint").hexdigest()}"\nurls = ["https://ckpt.example/ckpt.onnx"]\n\n'
        f'[[asset]]\nname = "vocab"\npath = "tiktoken/{hashlib.sha1(vocab_url.encode()).hexdigest()}"\n'
        f'sha256 = "{hashlib.sha256(b"a made-up vocab").hexdigest()}"\nurls = ["{vocab_url}"]\n'
    )
    dest = tmp_path / "assets"
    origin = vocab_url.rsplit("/", 1)[0] + "/"
    fetched = bake("fetch", "--manifest", manifest_path, "--dest", dest, "--cache-dir", tmp_path / "cache",
                   "--mirror", f"{origin}={src.as_uri()}/", "--mirror", f"https://ckpt.example/={src.as_uri()}/",
                   "--no-origin", "-q")  # fmt: skip
    assert fetched.returncode == 0, fetched.stderr
    assert bake("seal", "--manifest", manifest_path, "--dest", dest).returncode == 0
    return dest, manifest_path


def _served_env(dest: Path) -> dict[str, str]:
    """Each consumer's variable pointing at the baked files themselves: every lookup finds them."""
    return {"XDG_CACHE_HOME": str(dest), "TIKTOKEN_RS_CACHE_DIR": str(dest / "tiktoken"),
            "TIKTOKEN_CACHE_DIR": str(dest / "tiktoken"), "HF_HUB_CACHE": str(dest / "hub")}  # fmt: skip


def bare_bake(*args: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``bake ARGS`` where no consumer package is installed: Python without its site-packages."""
    from tests.runners import cli_env

    argv = [sys.executable, "-S", "-m", "bake", *map(str, args)]
    return subprocess.run(argv, env=cli_env(env), capture_output=True, text=True, timeout=60, check=False)


def _bare_doctor(dest: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return bare_bake("doctor", "--assets", dest, env=env)


def test_doctor_without_any_consumer_package_checks_every_served_file(tmp_path: Path) -> None:
    dest, _ = _sealed(tmp_path, "https://vocab.example/encodings/test.tiktoken")
    vocab = next(p for p in (dest / "tiktoken").iterdir() if not p.name.endswith(".tiktoken"))
    proc = _bare_doctor(dest, _served_env(dest))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    fields = [line.split("  ", 2) for line in proc.stdout.splitlines()]
    verdicts = {(verdict, library, rest.split(":")[0]) for verdict, library, rest in fields}
    assert verdicts == {
        ("ok", "s3tokenizer", CHECKPOINT),
        ("ok", "openai-harmony", f"tiktoken/{vocab.name}"),
        ("ok", "tiktoken", f"tiktoken/{vocab.name}"),
    }, proc.stdout
    for library in ("s3tokenizer", "openai-harmony", "tiktoken"):
        assert f"could not ask {library}: not installed" in proc.stderr, proc.stderr
    assert "nothing was checked" not in proc.stderr
    # The case the review found: a baked file gone from the tree. doctor used to say "nothing was checked".
    os.chmod(dest / "s3tokenizer", 0o755)
    (dest / CHECKPOINT).unlink()
    proc = _bare_doctor(dest, _served_env(dest))
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert f"WOULD DOWNLOAD  s3tokenizer  {CHECKPOINT}: " in proc.stdout, proc.stdout


def test_doctor_and_manifest_check_agree_on_a_vocab_tiktoken_rejects(tmp_path: Path) -> None:
    dest, manifest_path = _sealed(
        tmp_path, VOCAB_URL
    )  # o200k's URL, other bytes: tiktoken's table rejects them
    check = bake("manifest", "check", "--manifest", manifest_path)
    doctor = bake("doctor", "--assets", dest, env=_served_env(dest))
    assert (check.returncode, doctor.returncode) == (2, 3), check.stderr + doctor.stderr
    assert "MISMATCH  tiktoken  vocab: " in check.stdout, check.stdout
    assert f"MISMATCH  tiktoken  tiktoken/{VOCAB_NAME}: " in doctor.stdout, doctor.stdout
    assert f"ok  openai-harmony  tiktoken/{VOCAB_NAME}: " in doctor.stdout  # its table is compiled in
    expected = consumers.tiktoken_hashes()[VOCAB_URL]
    assert expected in check.stdout and expected in doctor.stdout


def test_doctor_and_manifest_check_name_the_libraries_alike(tmp_path: Path) -> None:
    """With no library to ask, both say which ones they could not ask, by the same names."""
    dest, manifest_path = _sealed(tmp_path, "https://vocab.example/encodings/test.tiktoken")
    check = bare_bake("manifest", "check", "--manifest", manifest_path)
    doctor = _bare_doctor(dest, _served_env(dest))
    assert check.returncode == 0 and doctor.returncode == 0, check.stderr + doctor.stderr
    for library in ("s3tokenizer", "tiktoken"):  # the libraries whose own tables both would read
        assert f"could not ask {library}: not installed" in check.stderr, check.stderr
        assert f"could not ask {library}: not installed" in doctor.stderr, doctor.stderr
