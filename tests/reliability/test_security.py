"""Security: non-root jobs, baked bytes no job can change, secrets in no output, nothing outside --dest.

Proven elsewhere, and not repeated here: tests/image/test_layout.py shows the Hub token (passed to
the image build as a BuildKit secret) is in no layer, in no history entry, in neither the config nor
bake.lock.json, and that a job user can change no baked file or directory directly
(tests/image/test_entrypoint_image.py, test_non_root_job_cannot_change_baked_files); a manifest
path with `..` or an absolute path is refused before anything is fetched (test_bad_manifest.py).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.image import ASSET_ROOT, MANIFEST, Run, fail_or_skip, tree_snapshot
from tests.mirror import Mirror

from . import INDEX_FILES, MIB, asset_entry, bake, blob, error_text, files_under, manifest_text, sha256

DATA = blob(MIB + 3, "secure")

# --- the image, as a job user other than root


def test_non_root_job_runs_bake_verify_and_the_verifying_entrypoint(run: Run) -> None:
    verify = run("bake", "verify", "--dest", ASSET_ROOT, user="1234:1234")
    assert verify.returncode == 0, verify.stderr
    job = run("sh", "-c", "echo job ran", env={"BAKE_VERIFY": "1"}, user="1234:1234")
    assert (job.returncode, job.stdout) == (0, "job ran\n"), job.stderr


# Each consumer location the entrypoint serves holds a link to a baked file. s3tokenizer rewrites a
# bad checkpoint in place, through that very link; a job user must not reach the baked bytes so.
THROUGH_LINKS = r"""
import json, os, subprocess, sys

cache = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
where = {
    "s3tokenizer": os.path.join(cache, "s3tokenizer"),
    "TIKTOKEN_RS_CACHE_DIR": os.environ["TIKTOKEN_RS_CACHE_DIR"],
    "TIKTOKEN_CACHE_DIR": os.environ["TIKTOKEN_CACHE_DIR"],
}


def attempt(action):
    try:
        action()
        return "done"
    except OSError as exc:
        return type(exc).__name__


result = {}
for loc, directory in where.items():
    for name in os.listdir(directory):
        link = os.path.join(directory, name)
        result[f"{loc}/{name}"] = {
            "is_link": os.path.islink(link),
            "open r+b": attempt(lambda: open(link, "r+b").close()),
            "open wb": attempt(lambda: open(link, "wb").close()),
            "open ab": attempt(lambda: open(link, "ab").close()),
            "truncate": attempt(lambda: os.truncate(link, 0)),
            "chmod": attempt(lambda: os.chmod(link, 0o666)),
        }
check = subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=sys.argv[1], capture_output=True, text=True)
print(json.dumps({"links": result, "sums_ok": check.returncode == 0}))
"""


@pytest.fixture(scope="module")
def through_links(run: Run) -> dict:
    proc = run("python3", "-c", THROUGH_LINKS, ASSET_ROOT, user="1234:1234")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


WRITES = ["open r+b", "open wb", "open ab", "truncate", "chmod"]
SERVED = [f"s3tokenizer/{a.path.split('/')[-1]}" for a in MANIFEST if a.path.startswith("s3tokenizer/")] + [
    f"{var}/{a.path.split('/')[-1]}"
    for var in ("TIKTOKEN_RS_CACHE_DIR", "TIKTOKEN_CACHE_DIR")
    for a in MANIFEST
    if a.path.startswith("tiktoken/")
]


@pytest.mark.parametrize("write", WRITES)
@pytest.mark.parametrize("served", SERVED)
def test_non_root_job_cannot_write_baked_bytes_through_a_served_link(
    through_links: dict, served: str, write: str
) -> None:
    entry = through_links["links"][served]
    assert entry["is_link"]
    assert entry[write] == "PermissionError"


def test_baked_bytes_are_intact_after_the_attempts(through_links: dict) -> None:
    assert through_links["sums_ok"]


# --- never written outside the asset root, whatever links are planted under --dest


def link(at: Path, to: str | Path) -> None:
    at.parent.mkdir(parents=True, exist_ok=True)
    at.symlink_to(to)


# case -> (asset path, what to plant given (dest, outside), expected exit code)
PLANTED: dict[str, tuple[str, Callable[[Path, Path], None], int]] = {
    "parent-directory-links-out": ("m/model.onnx", lambda d, o: link(d / "m", o / "dir"), 3),
    "grandparent-directory-links-out": ("m/sub/model.onnx", lambda d, o: link(d / "m", o / "dir"), 3),
    "relative-link-to-the-parent-of-dest": ("m/model.onnx", lambda d, o: link(d / "m", ".."), 3),
    "target-links-to-an-outside-file": (
        "m/model.onnx",
        lambda d, o: link(d / "m/model.onnx", o / "victim.bin"),
        0,
    ),
    "target-links-to-an-outside-directory": (
        "m/model.onnx",
        lambda d, o: link(d / "m/model.onnx", o / "dir"),
        0,
    ),
    "target-dangles-to-an-outside-name": (
        "m/model.onnx",
        lambda d, o: link(d / "m/model.onnx", o / "new.bin"),
        0,
    ),
    "index-files-link-out": (
        "m/model.onnx",
        lambda d, o: [link(d / name, o / "victim.bin") for name in INDEX_FILES],
        0,
    ),
    "link-that-stays-inside-dest": (
        "m/model.onnx",
        lambda d, o: (d / "real").mkdir() or link(d / "m", "real"),
        0,
    ),
}


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory beside --dest holding a file and a directory that links planted in --dest point at."""
    out = tmp_path / "outside"
    (out / "dir").mkdir(parents=True)
    (out / "dir" / "kept.txt").write_text("outside data\n")
    (out / "victim.bin").write_bytes(b"must never be overwritten\n")
    return out


@pytest.mark.parametrize("case", list(PLANTED))
def test_planted_link_is_never_written_through(tmp_path: Path, outside: Path, case: str) -> None:
    path, plant, code = PLANTED[case]
    dest = tmp_path / "dest"
    dest.mkdir()
    plant(dest, outside)
    before = tree_snapshot(tmp_path / "outside")
    with Mirror({"/model.onnx": DATA}) as m:
        manifest = tmp_path / "assets.toml"
        manifest.write_text(manifest_text([asset_entry("model", path, DATA, m.url("/model.onnx"))]))
        proc = bake("fetch", "--manifest", manifest, "--dest", dest, "--cache-dir", tmp_path / "cache")
    assert proc.returncode == code, proc.stderr
    assert tree_snapshot(tmp_path / "outside") == before
    if code == 3:
        assert "asset 'model'" in error_text(proc.stderr) and "outside --dest" in proc.stderr
        assert not any(p.endswith("model.onnx") for p in files_under(dest))
    else:
        installed = dest / path
        assert installed.is_file() and sha256(installed.read_bytes()) == sha256(DATA)
        assert os.path.realpath(installed).startswith(str(dest) + os.sep)
        for name in INDEX_FILES:
            assert not (dest / name).is_symlink()


# --- secrets: in no log line (even -v), message, report, destination or cache file

SECRET = "hf_reliability_SECRET_0123456789"
REPO_ID = "FunAudioLLM/Fun-CosyVoice3-0.5B-2512"


@pytest.fixture
def hub() -> Iterator[tuple[Mirror, Mirror]]:
    """A loopback Hub (HF_ENDPOINT) and the CDN its resolve URLs redirect to."""
    try:
        import huggingface_hub  # noqa: F401 - hf:// sources are fetched through it
    except ImportError:
        fail_or_skip("huggingface_hub is not installed: pip install -e '.[test]'")
    with Mirror() as hub_server, Mirror() as cdn:
        yield hub_server, cdn


# case -> exit code. The secret is a Hub token (HF_TOKEN) or a password in a URL's userinfo.
SECRET_CASES = [
    pytest.param("hf-ok", 0),
    pytest.param("hf-token-refused", 3),
    pytest.param("hf-cdn-missing", 3),
    pytest.param("url-password-ok", 0),
    pytest.param("url-password-404", 3),
    pytest.param("mirror-password-ok", 0),
    pytest.param("mirror-password-plain-http-refused", 2),
    pytest.param("mirror-password-bad-port", 2),
    pytest.param("mirror-password-bad-scheme", 2),
    pytest.param("manifest-url-password-refused", 2),
]


@pytest.mark.parametrize(("case", "code"), SECRET_CASES)
def test_secret_is_in_no_output(tmp_path: Path, hub: tuple[Mirror, Mirror], case: str, code: int) -> None:
    hub_server, cdn = hub
    env = {"HF_ENDPOINT": hub_server.base_url, "HF_TOKEN": SECRET}
    port = hub_server.base_url.rsplit(":", 1)[1]
    creds = f"http://reader:{SECRET}@127.0.0.1:{port}"
    hub_server.add("/private/tok.onnx", DATA)
    extra: list[str] = []
    if case.startswith("hf-"):
        blob_path = hub_server.add_hub_file(
            REPO_ID,
            "main",
            "tok.onnx",
            DATA,
            cdn=cdn,
            token="hf_someone_else" if case == "hf-token-refused" else SECRET,
        )
        if case == "hf-cdn-missing":
            cdn.remove(blob_path)
        url = f"hf://{REPO_ID}@main/tok.onnx"
    elif case.startswith("url-"):
        url = f"{creds}/private/{'gone' if case == 'url-password-404' else 'tok.onnx'}"
    elif case.startswith("mirror-"):
        url = "https://origin.invalid/private/tok.onnx"
        replacement = {
            "mirror-password-ok": f"{creds}/",
            "mirror-password-plain-http-refused": f"http://reader:{SECRET}@example.com/",
            "mirror-password-bad-port": f"http://reader:{SECRET}@127.0.0.1:99999/",
            "mirror-password-bad-scheme": f"ftp://reader:{SECRET}@127.0.0.1/",
        }[case]
        extra = ["--no-origin", "--mirror", f"https://origin.invalid/={replacement}"]
    else:
        url = f"http://reader:{SECRET}@example.com/private/tok.onnx"
    manifest = tmp_path / "assets.toml"
    manifest.write_text(manifest_text([asset_entry("tok", "s3tokenizer/tok.onnx", DATA, url)]))
    report = tmp_path / "report.json"
    args = [
        "--manifest",
        manifest,
        "--dest",
        tmp_path / "dest",
        "--cache-dir",
        tmp_path / "cache",
        "--json",
        report,
    ]
    proc = bake("-v", "fetch", *args, *extra, "--attempts", "1", env=env)
    assert proc.returncode == code, proc.stderr
    assert SECRET not in proc.stdout + proc.stderr
    for root in (tmp_path / "dest", tmp_path / "cache"):
        for rel in files_under(root):
            assert SECRET.encode() not in (root / rel).read_bytes(), f"{root / rel} holds the secret"
    if report.exists():
        assert SECRET not in report.read_text()
