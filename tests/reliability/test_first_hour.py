"""A new user's first hour (issue 28, and issue 29's findings 10 and 11 for `bake add`): one test per finding.

Each runs the real CLI the way a newcomer would, on file:// URLs and loopback servers, and asserts
what the user must get: a manifest started by `bake add`, one error line per failure with advice
that is right, no traceback, and the contract's exit codes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bake import manifest, urls
from tests.mirror import Mirror

from . import KIB, REPO, bake, blob, cli_env, error_text, manifest_text, sha256

DATA = blob(64 * KIB, "first-hour")
pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / "src" / "model.bin"
    path.parent.mkdir()
    path.write_bytes(DATA)
    return path


def add(manifest_path: Path, url: str, cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return bake("add", url, "--path", "data/model.bin", "--manifest", manifest_path, "--cache-dir", cache,
                *args)  # fmt: skip


def assert_one_clean_error(proc: subprocess.CompletedProcess[str], code: int) -> str:
    """The exit code, no traceback, and exactly one ``bake: error:`` line; returns the error text."""
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.count("bake: error:") == 1, proc.stderr
    return error_text(proc.stderr)


# -- finding 1: `bake add` starts a manifest ------------------------------------------------------


@pytest.mark.parametrize("start", ["missing", "empty", "comments only"])
def test_add_starts_a_manifest(tmp_path: Path, source: Path, start: str) -> None:
    target = tmp_path / "assets.toml"
    if start == "empty":
        target.write_text("")
    elif start == "comments only":
        target.write_text("# the assets of our CI\n")
    proc = add(target, source.as_uri(), tmp_path / "cache")
    assert proc.returncode == 0, proc.stderr
    (asset,) = manifest.load_manifest(target)
    assert (asset.path, asset.sha256, asset.size) == ("data/model.bin", sha256(DATA), len(DATA))
    if start == "comments only":
        assert target.read_text().startswith("# the assets of our CI\n")


# -- finding 2: no traceback when the manifest's directory cannot be written -------------------------


def test_add_into_a_read_only_directory_is_one_clean_error(tmpfs, tmp_path: Path, source: Path) -> None:
    where = tmpfs("ro", 1024 * KIB)
    target = where / "assets.toml"
    target.write_text(manifest_text([{"name": "a", "path": "data/a", "sha256": "0" * 64,
                                      "urls": ["file:///nowhere"]}]))  # fmt: skip
    subprocess.run(["mount", "-o", "remount,ro", str(where)], check=True)
    proc = add(target, source.as_uri(), tmp_path / "cache")
    errors = assert_one_clean_error(proc, 2)
    assert str(target) in errors and "read-only" in errors.lower(), errors


def test_add_checks_the_manifest_directory_before_it_downloads(
    tmpfs, tmp_path: Path, clean_net_env: None
) -> None:
    """Issue 37: the directory was found read-only only after the download."""
    where = tmpfs("ro", 1024 * KIB, "ro")
    with Mirror({"/m.bin": DATA}) as served:
        for target in (where / "assets.toml", tmp_path / "no-such-dir" / "assets.toml"):
            proc = add(target, served.url("/m.bin"), tmp_path / "cache")
            errors = assert_one_clean_error(proc, 2)
            assert str(target.parent) in errors and "nothing was fetched" in errors, errors
        assert served.requests["/m.bin"] == 0, "the file was downloaded before the manifest was checked"


# -- finding 4: advice that is right -------------------------------------------------------------------


def fetch_one(tmp_path: Path, url: str, *, size: int | None = len(DATA)) -> subprocess.CompletedProcess[str]:
    entry = {"name": "model", "path": "data/model.bin", "sha256": sha256(DATA), "urls": [url]}
    if size is not None:
        entry["size"] = size
    target = tmp_path / "assets.toml"
    target.write_text(manifest_text([entry]))
    return bake("fetch", "--manifest", target, "--dest", tmp_path / "dest", "--cache-dir", tmp_path / "c",
                "--attempts", "3")  # fmt: skip


@pytest.mark.parametrize("what", ["a directory", "an unknown host"])
def test_a_permanent_error_is_not_retried_nor_blamed_on_the_network(tmp_path: Path, what: str) -> None:
    url = (tmp_path / "a-directory").as_uri() if what == "a directory" else "https://no-such-host.invalid/m"
    (tmp_path / "a-directory").mkdir()
    proc = fetch_one(tmp_path, url)
    assert_one_clean_error(proc, 3)
    assert "retrying" not in proc.stderr, proc.stderr
    assert "--attempts" not in proc.stderr and "flaky" not in proc.stderr, proc.stderr


def test_a_resolver_that_cannot_answer_now_is_transient() -> None:
    import socket

    from bake.fetch.transport import resolver_failure

    assert resolver_failure(socket.gaierror(socket.EAI_AGAIN, "Temporary failure"), "h").retryable
    assert not resolver_failure(
        socket.gaierror(socket.EAI_NONAME, "Name or service not known"), "h"
    ).retryable


def test_a_size_mismatch_says_fix_the_manifest(tmp_path: Path, source: Path) -> None:
    proc = fetch_one(tmp_path, source.as_uri(), size=len(DATA) + 1)
    errors = assert_one_clean_error(proc, 3)
    assert "size" in errors and "in the manifest" in errors, errors
    assert "fix the source" not in errors, errors


def test_errors_from_add_point_at_no_manifest_entry(tmp_path: Path, clean_net_env: None) -> None:
    with Mirror({}) as served:
        proc = add(tmp_path / "assets.toml", served.url("/missing.bin"), tmp_path / "cache")
    errors = assert_one_clean_error(proc, 3)
    assert "in the manifest" not in errors and "this sha256" not in errors, errors
    assert "URL" in errors, errors


# -- issue 29 finding 10: a FIFO as the manifest ----------------------------------------------------


def test_add_refuses_a_fifo_as_the_manifest_and_never_blocks(tmp_path: Path, source: Path) -> None:
    fifo = tmp_path / "assets.toml"
    os.mkfifo(fifo)
    proc = bake("add", source.as_uri(), "--path", "data/model.bin", "--manifest", fifo, "--cache-dir",
                tmp_path / "cache", timeout=20)  # fmt: skip
    errors = assert_one_clean_error(proc, 2)
    assert "regular file" in errors and str(fifo) in errors, errors


# -- issue 29 finding 11: credentials in the query string ----------------------------------------------


@pytest.mark.parametrize("param", ["token", "access_token", "X-Amz-Signature", "sig"])
def test_add_writes_no_query_credentials(tmp_path: Path, clean_net_env: None, param: str) -> None:
    with Mirror({"/m.bin": DATA}) as served:
        url = served.url("/m.bin") + f"?{param}=s3cret-T0ken&rev=2"
        target = tmp_path / "assets.toml"
        proc = add(target, url, tmp_path / "cache")
    assert proc.returncode == 0, proc.stderr
    assert "s3cret" not in target.read_text()
    assert "s3cret" not in proc.stdout + proc.stderr
    assert manifest.load_manifest(target)[0].urls == (served.url("/m.bin") + "?rev=2",)
    assert "--mirror" in proc.stderr and "bake_mirrors" in proc.stderr, proc.stderr


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://h/f?token=abc&rev=2", "https://h/f?token=***&rev=2"),
        ("https://u:pw@h/f?X-Amz-Signature=abc#x", "https://u:***@h/f?X-Amz-Signature=***#x"),
        ("https://h/f?sig=abc&sv=2020", "https://h/f?sig=***&sv=2020"),
        ("https://h/f?revision=main", "https://h/f?revision=main"),
    ],
)
def test_messages_never_show_a_query_credential(url: str, shown: str) -> None:
    assert urls.redact_url(url) == shown


# -- finding 5: mistakes that pass in silence -----------------------------------------------------------


def write_manifest(tmp_path: Path, url: str, path: str = "data/model.bin") -> Path:
    target = tmp_path / "assets.toml"
    target.write_text(manifest_text([{"name": "model", "path": path, "sha256": sha256(DATA), "urls": [url]}]))
    return target


def fetched(tmp_path: Path, source: Path, path: str = "data/model.bin") -> tuple[Path, Path]:
    """A manifest of one asset, fetched into tmp_path/dest; returns both."""
    target = write_manifest(tmp_path, source.as_uri(), path)
    dest = tmp_path / "dest"
    proc = bake("fetch", "--manifest", target, "--dest", dest, "--cache-dir", tmp_path / "c")
    assert proc.returncode == 0, proc.stderr
    return target, dest


def test_a_typo_in_a_consumer_prefix_is_named(tmp_path: Path, source: Path) -> None:
    target = write_manifest(tmp_path, source.as_uri(), "tiktokn/o200k_base.tiktoken")
    proc = bake("fetch", "--manifest", target, "--dest", tmp_path / "dest", "--cache-dir", tmp_path / "c")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("tiktokn/") == 1 and "did you mean 'tiktoken/'" in proc.stderr, proc.stderr


def test_doctor_on_an_unsealed_directory_is_no_pass(tmp_path: Path, source: Path) -> None:
    _, dest = fetched(tmp_path, source)
    proc = bake("doctor", "--assets", dest)
    errors = assert_one_clean_error(proc, 3)
    assert "bake seal" in errors, errors


@pytest.mark.parametrize("url", ["file:../x.bin", "file:x.bin", "file://build-host/srv/x.bin"])
def test_a_file_url_a_build_would_misread_is_refused(tmp_path: Path, url: str) -> None:
    proc = bake("manifest", "--manifest", write_manifest(tmp_path, url))
    errors = assert_one_clean_error(proc, 2)
    assert url in errors and "file:///" in errors, errors


# -- finding 6: integrity holes in --dest ---------------------------------------------------------------


@pytest.mark.parametrize("command", ["verify", "seal"])
def test_a_link_out_of_dest_fails_verify_and_seal(tmp_path: Path, source: Path, command: str) -> None:
    target, dest = fetched(tmp_path, source)
    outside = tmp_path / "outside.bin"
    outside.write_bytes(DATA)
    (dest / "data/model.bin").unlink()
    (dest / "data/model.bin").symlink_to(outside)
    proc = bake(command, "--manifest", target, "--dest", dest)
    errors = assert_one_clean_error(proc, 3)
    assert "data/model.bin" in errors and "link" in errors, errors


def test_seal_refuses_stray_files_and_removes_them_when_asked(tmp_path: Path, source: Path) -> None:
    target, dest = fetched(tmp_path, source)
    (dest / "data/old.bin").write_bytes(b"an entry since removed from the manifest")
    proc = bake("seal", "--manifest", target, "--dest", dest)
    errors = assert_one_clean_error(proc, 2)
    assert "data/old.bin" in errors and "--remove-stray" in errors, errors
    assert (dest / "data/old.bin").exists()
    proc = bake("seal", "--manifest", target, "--dest", dest, "--remove-stray")
    assert proc.returncode == 0, proc.stderr
    assert not (dest / "data/old.bin").exists() and (dest / "data/model.bin").exists()


# -- finding 7: one exit code for a read-only --dest and its read-only parent ------------------------------


@pytest.mark.parametrize("where", ["dest", "parent"])
def test_a_read_only_dest_and_a_read_only_parent_exit_alike(
    tmpfs, tmp_path: Path, source: Path, where: str
) -> None:
    mount = tmpfs("ro", 1024 * KIB)
    dest = mount if where == "dest" else mount / "dest"
    subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
    proc = bake("fetch", "--manifest", write_manifest(tmp_path, source.as_uri()), "--dest", dest,
                "--cache-dir", tmp_path / "c")  # fmt: skip
    errors = assert_one_clean_error(proc, 2)
    assert f"--dest {dest}" in errors, errors


# -- finding 8: output ----------------------------------------------------------------------------------


def failing_fetch(tmp_path: Path, source: Path, *args: str) -> subprocess.CompletedProcess[str]:
    good = {"name": "good", "path": "data/good.bin", "sha256": sha256(DATA), "urls": [source.as_uri()]}
    gone = source.as_uri() + ".gone"
    bad = {"name": "bad", "path": "data/bad.bin", "sha256": sha256(b"gone"), "urls": [gone]}
    target = tmp_path / "assets.toml"
    target.write_text(manifest_text([good, bad]))
    return bake("fetch", "--manifest", target, "--dest", tmp_path / "dest", "--cache-dir", tmp_path / "c",
                *args)  # fmt: skip


def test_a_failure_is_stated_once(tmp_path: Path, source: Path) -> None:
    proc = failing_fetch(tmp_path, source)
    assert_one_clean_error(proc, 3)
    assert proc.stderr.count(".gone") == 1, proc.stderr
    lines = proc.stderr.splitlines()
    tried = [i for i, line in enumerate(lines) if line.endswith("source(s):")]
    assert tried and all(lines[i + 1].startswith("  - ") for i in tried), proc.stderr  # never a dangling list


@pytest.mark.parametrize("to", ["file", "stdout"])
def test_json_is_complete_on_failure(tmp_path: Path, source: Path, to: str) -> None:
    import json

    report = tmp_path / "report.json"
    proc = failing_fetch(tmp_path, source, "--json", str(report) if to == "file" else "-")
    assert proc.returncode == 3, proc.stderr
    doc = json.loads(report.read_text() if to == "file" else proc.stdout)
    by_name = {a["name"]: a for a in doc["assets"]}
    assert by_name["good"]["ok"] is True and by_name["bad"]["ok"] is False, doc
    (error,) = doc["errors"]
    assert error["asset"] == "bad" and error["url"].endswith(".gone"), doc
    assert not (REPO / "-").exists()


def test_no_doubled_prefix(tmp_path: Path) -> None:
    proc = bake("fetch", "--dst", tmp_path)
    line = assert_one_clean_error(proc, 2).splitlines()[0]
    assert line.startswith("bake: error: ") and "bake: error: bake" not in line, line


# -- finding 9: conventions ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "command", ["fetch", "verify", "manifest", "doctor", "seal", "add", "check-context", "publish", "pin",
                "cache prune"]
)  # fmt: skip
def test_q_and_v_are_taken_after_every_subcommand(tmp_path: Path, command: str) -> None:
    for flag in ("-q", "-v", "--quiet", "--verbose"):
        proc = bake(*command.split(), flag, cwd=tmp_path)
        assert "Traceback" not in proc.stderr and proc.returncode in (0, 2, 3, 4), proc.stderr
        assert f"unknown option {flag}" not in proc.stderr and "unrecognized" not in proc.stderr, proc.stderr


def test_seal_says_what_it_did(tmp_path: Path, source: Path) -> None:
    target, dest = fetched(tmp_path, source)
    proc = bake("seal", "--manifest", target, "--dest", dest)
    assert proc.returncode == 0 and "sealed" in proc.stdout, (proc.stdout, proc.stderr)


@pytest.mark.parametrize(
    ("argv", "env", "named"),
    [
        (["fecth"], {}, "did you mean fetch?"),
        (["fetch", "--dest", "d", "--connections", "abc"], {}, "--connections"),
        (["fetch", "--dest", "d"], {"BAKE_MIRRORS": "garbage"}, "BAKE_MIRRORS"),
    ],
)
def test_errors_name_the_mistake(
    tmp_path: Path, source: Path, argv: list[str], env: dict, named: str
) -> None:
    target = write_manifest(tmp_path, source.as_uri())
    proc = bake(*argv, "--manifest", target, cwd=tmp_path, env=env) if argv != ["fecth"] else bake(*argv)
    errors = assert_one_clean_error(proc, 2)
    assert named in errors, errors
    assert "_positive_int" not in errors, errors


def test_a_sha256_prefix_is_taken_and_shown_bare(tmp_path: Path) -> None:
    # Round 5 accepts the prefix pip and Docker write (it was refused, "drop the prefix", before).
    target = tmp_path / "assets.toml"
    target.write_text(manifest_text([{"name": "m", "path": "d/m", "sha256": "sha256:" + sha256(DATA),
                                      "urls": ["file:///x"]}]))  # fmt: skip
    proc = bake("manifest", "--manifest", target)
    assert proc.returncode == 0, proc.stderr
    assert f'"sha256": "{sha256(DATA)}"' in proc.stdout and "sha256:" not in proc.stdout


def test_a_manifest_with_a_bom_reads(tmp_path: Path, source: Path) -> None:
    target = write_manifest(tmp_path, source.as_uri())
    target.write_bytes(b"\xef\xbb\xbf" + target.read_bytes())
    proc = bake("manifest", "digest", "--manifest", target)
    assert proc.returncode == 0, proc.stderr


# -- finding 10: defaults that fit ------------------------------------------------------------------------


def test_bake_manifest_names_the_manifest_and_the_option_wins(tmp_path: Path, source: Path) -> None:
    named = write_manifest(tmp_path, source.as_uri())
    proc = bake("manifest", "digest", cwd=tmp_path, env={"BAKE_MANIFEST": str(named)})
    assert proc.returncode == 0, proc.stderr
    proc = bake("manifest", "digest", "--manifest", tmp_path / "other.toml", cwd=tmp_path,
                env={"BAKE_MANIFEST": str(named)})  # fmt: skip
    assert proc.returncode == 2 and "other.toml" in proc.stderr, proc.stderr
    proc = bake("fetch", "--dest", tmp_path / "d", cwd=tmp_path, env={"BAKE_MANIFEST": "absent.toml"})
    errors = assert_one_clean_error(proc, 2)
    assert "absent.toml" in errors and "BAKE_MANIFEST" in errors, errors


def test_a_small_file_without_a_size_fetches_on_a_small_disk(tmpfs, tmp_path: Path, source: Path) -> None:
    small = tmpfs("small", 8 * 1024 * KIB)
    target = tmp_path / "assets.toml"
    target.write_text(
        manifest_text([{"name": "m", "path": "d/m", "sha256": sha256(DATA), "urls": [source.as_uri()]}])
    )
    proc = bake("fetch", "--manifest", target, "--dest", small / "dest", "--cache-dir", small / "cache")
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("where", ["HF_TOKEN_PATH", "HF_HOME/token"])
def test_the_stored_hub_token_is_honoured(tmp_path: Path, where: str) -> None:
    token = tmp_path / "token"
    token.write_text("hf_stored\n")
    env = {"HF_TOKEN_PATH": str(token)} if where == "HF_TOKEN_PATH" else {"HF_HOME": str(tmp_path)}
    code = "from bake.fetch.sources import hf_token; print(hf_token())"
    proc = subprocess.run([sys.executable, "-c", code], env=cli_env({"HF_TOKEN": "", **env}),
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert proc.stdout.strip() == "hf_stored", proc.stderr


# -- the property: any command, any plausible mistake ----------------------------------------------------

_WORDS = st.sampled_from(["frobnicate", "colour", "force-it", "yes", "typo", "later"])
_BAD_NUMBERS = st.sampled_from(["abc", "0", "-3", "1e999", "nan", "12Q", "0x10", "1,5"])
# Options whose value a type checks, per command; cache prune's --max-age counts days.
_TYPED = {
    "fetch": ["--connections", "--attempts", "--jobs", "--timeout", "--deadline", "--max-size", "--min-free"],
    "add": ["--connections", "--attempts", "--timeout", "--deadline", "--max-size", "--min-free"],
    "cache prune": ["--max-age"],
}
_ZERO_ALLOWED = ("--max-size", "--min-free", "--max-age")
_SELECTING = ("fetch", "manifest", "seal", "verify")


@pytest.fixture(scope="module")
def baked(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """One manifest, its source and a fetched --dest, shared by every example (none may change them)."""
    root = tmp_path_factory.mktemp("mistakes")
    source = root / "model.bin"
    source.write_bytes(DATA)
    target, dest = fetched(root, source)
    return {"root": str(root), "manifest": str(target), "dest": str(dest), "url": source.as_uri()}


def base_args(command: str, baked: dict[str, str]) -> list[str]:
    """A valid invocation of ``command`` that changes nothing (a mistake is added to it)."""
    m, d = ["--manifest", baked["manifest"]], ["--dest", baked["dest"]]
    cache = ["--cache-dir", str(Path(baked["root"]) / "c")]
    return {
        "fetch": [*m, *d, *cache],
        "verify": [*m, *d],
        "manifest": m,
        "seal": [*m, *d],
        "add": [baked["url"], "--path", "data/other.bin", *m, *cache],
        "doctor": ["--assets", baked["dest"]],
        "cache prune": cache,
    }[command]


def _long_options(command: str) -> list[str]:
    from bake.cli import build_parser

    parser = build_parser()
    for word in command.split():
        parser = next(a for a in parser._actions if a.dest in ("command", "cache_command")).choices[word]
    return sorted(o for o in parser._option_string_actions if o.startswith("--") and len(o) > 5)


@st.composite
def mistakes(draw: st.DrawFn, command: str, baked: dict[str, str]) -> tuple[list[str], str]:
    """One plausible mistake for ``command``: the arguments to add, and the bad token they carry."""
    kinds = ["misspelt", "unknown"] + (["typed"] if command in _TYPED else [])
    kinds += ["group", "absent manifest"] if command in _SELECTING else []
    kinds += ["mirror"] if command in ("fetch", "add") else []
    kinds += ["scheme", "relative file"] if command == "add" else []
    kinds += ["absent assets"] if command == "doctor" else []
    kind, word = draw(st.sampled_from(kinds)), draw(_WORDS)
    if kind == "misspelt":
        option = draw(st.sampled_from(_long_options(command)))
        at = draw(st.integers(3, len(option) - 1))
        token = option[:at] + option[at + 1 :]  # a letter dropped, as fingers drop one
        if token in _long_options(command):
            token = option + "s"
        return [token], token
    if kind == "unknown":
        return [f"--{word}"], f"--{word}"
    if kind == "typed":
        option = draw(st.sampled_from(_TYPED[command]))
        # 0 bytes and 0 days are real settings; a count or a number of seconds must be positive.
        value = draw(_BAD_NUMBERS.filter(lambda v: v != "0" or option not in _ZERO_ALLOWED))
        return [option, value], value
    if kind == "group":
        return ["--group", f"no-such-{word}"], f"no-such-{word}"
    if kind == "absent manifest":
        return ["--manifest", str(Path(baked["root"]) / f"absent-{word}.toml")], f"absent-{word}.toml"
    if kind == "absent assets":
        return ["--assets", str(Path(baked["root"]) / f"absent-{word}")], f"absent-{word}"
    if kind == "mirror":
        return ["--mirror", f"garbage-{word}"], f"garbage-{word}"
    return [], f"ftp://host/{word}.bin" if kind == "scheme" else f"file:relative-{word}.bin"


@given(data=st.data(), command=st.sampled_from(["fetch", "verify", "manifest", "seal", "add", "doctor",
                                                 "cache prune"]))  # fmt: skip
@pytest.mark.timeout(300)
def test_a_plausible_mistake_is_named_once_with_a_contract_exit(
    baked: dict[str, str], data: st.DataObject, command: str
) -> None:
    from bake.cli import EXIT_CODES

    extra, token = data.draw(mistakes(command, baked))
    args = base_args(command, baked)
    if command == "add" and not extra:  # a bad URL: in place of the good one
        args[0] = token
    proc = bake(*command.split(), *args, *extra, cwd=Path(baked["root"]))
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode in EXIT_CODES[command.split()[0]] and proc.returncode != 0, proc.stderr
    naming = [line for line in proc.stderr.splitlines() if token in line]
    assert len(naming) == 1 and "bake: error:" in proc.stderr, (token, proc.stderr)
