"""``BAKE_OFFLINE=1``: ``bake.offline`` as seal writes it, and the entrypoint exporting each fully baked
consumer's own offline switch (HF_HUB_OFFLINE, TIKTOKEN_ENCODINGS_BASE) under dash and busybox sh."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest

from bake import consumers, offline
from tests.serve import (
    SHELLS,
    Box,
    Shell,
    content,
    job_env,
    new_box,
    ready_lines,
    resolved,
    sealed,
    sealed_hub,
    shell_and_box,
)

pytestmark = pytest.mark.timeout(120)

O200K_URL = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"
VOCAB = f"tiktoken/{hashlib.sha1(O200K_URL.encode()).hexdigest()}"
FILES = {VOCAB: content("o200k", 1500), "s3tokenizer/speech_tokenizer_v3_25hz.onnx": content("v3", 900)}


def test_seal_writes_the_switches_of_the_consumers_it_bakes() -> None:
    text = offline.write(offline.switches(consumers.BUILTINS, list(FILES)))
    assert text == "# bake offline v1\ntiktoken\tTIKTOKEN_ENCODINGS_BASE\t@tiktoken\n"
    assert offline.read(text) == [offline.Switch("tiktoken", "TIKTOKEN_ENCODINGS_BASE", "@tiktoken")]
    # s3tokenizer has no switch of its own: nothing, and the file is its header alone.
    assert (
        offline.write(offline.switches(consumers.BUILTINS, ["s3tokenizer/m.onnx"])) == "# bake offline v1\n"
    )


@pytest.mark.parametrize(
    "switch",
    [
        offline.Switch("tiktoken", "LD_PRELOAD", "x"),
        offline.Switch("tiktoken", "PATH", "x"),
        offline.Switch("tiktoken", "X", "$(id)"),
        offline.Switch("tiktoken", "X", "@../etc"),
        offline.Switch("tiktoken", "X", "@/etc"),
        offline.Switch("-", "X", "1"),
    ],
    ids=str,
)
def test_the_writer_refuses_a_switch_that_could_steer_the_shell(switch: offline.Switch) -> None:
    with pytest.raises(ValueError, match="expected"):
        offline.write([switch])


shell, box = shell_and_box(sealed(FILES, {VOCAB: O200K_URL}))


def test_offline_exports_the_switch_of_a_consumer_served_whole(box: Box) -> None:
    result = box.run("env", BAKE_OFFLINE=1, XDG_CACHE_HOME=box.root / "xdg")
    env = job_env(result)
    assert env["TIKTOKEN_ENCODINGS_BASE"] == f"{box.assets}/tiktoken"
    assert Path(env["TIKTOKEN_ENCODINGS_BASE"], "o200k_base.tiktoken").read_bytes() == FILES[VOCAB]
    assert "offline: TIKTOKEN_ENCODINGS_BASE" in ready_lines(result.stderr)[0]
    printed = box.run("--print-env", BAKE_OFFLINE=1, XDG_CACHE_HOME=box.root / "xdg")
    assert f"export TIKTOKEN_ENCODINGS_BASE='{box.assets}/tiktoken'" in printed.stdout.splitlines()


def test_without_the_flag_no_switch_is_exported(box: Box) -> None:
    env = job_env(box.run("env", XDG_CACHE_HOME=box.root / "xdg"))
    assert "TIKTOKEN_ENCODINGS_BASE" not in env and "HF_HUB_OFFLINE" not in env


def test_a_consumer_with_a_location_unserved_gets_no_switch(box: Box) -> None:
    """A file where TIKTOKEN_RS_CACHE_DIR's directory belongs: that location is not served."""
    blocker = box.root / "blocker"
    blocker.write_bytes(b"x")
    result = box.run("env", BAKE_OFFLINE=1, TIKTOKEN_RS_CACHE_DIR=blocker, XDG_CACHE_HOME=box.root / "xdg")
    assert "TIKTOKEN_ENCODINGS_BASE" not in job_env(result)


def test_the_jobs_own_value_is_left_as_it_is(box: Box) -> None:
    result = box.run(
        "env", BAKE_OFFLINE=1, TIKTOKEN_ENCODINGS_BASE="/elsewhere", XDG_CACHE_HOME=box.root / "xdg"
    )
    assert job_env(result)["TIKTOKEN_ENCODINGS_BASE"] == "/elsewhere"
    assert "TIKTOKEN_ENCODINGS_BASE='/elsewhere' is the job's own" in result.stderr


@pytest.mark.parametrize(
    "line",
    [
        "tiktoken\tLD_PRELOAD\tx",
        "tiktoken\tPATH\t/tmp",
        "tiktoken\tX\t$(touch pwned)",
        "tiktoken\tX\t@../../etc",
        "tiktoken\tX\tone\textra",
        "tiktoken\tX;touch pwned\t1",
    ],
)
def test_a_hostile_line_is_skipped_and_never_run(box: Box, line: str) -> None:
    target = box.assets / offline.NAME
    os.chmod(box.assets, 0o755)
    os.chmod(target, 0o644)
    target.write_text(f"{offline.HEADER}\n{line}\n")
    result = box.run("env", BAKE_OFFLINE=1, XDG_CACHE_HOME=box.root / "xdg")
    env = job_env(result)
    assert "line 2: expected CONSUMER, VAR and VALUE" in result.stderr
    assert "LD_PRELOAD" not in env and env["PATH"] == str(box.bin) and "X" not in env
    assert not (box.root / "pwned").exists()


def test_an_older_seal_without_the_file_is_named_once(box: Box) -> None:
    os.chmod(box.assets, 0o755)
    (box.assets / offline.NAME).unlink()
    result = box.run("env", BAKE_OFFLINE=1, XDG_CACHE_HOME=box.root / "xdg")
    assert result.stderr.count("no switch exported") == 1 and "TIKTOKEN_ENCODINGS_BASE" not in job_env(result)


@pytest.mark.parametrize("shell_", SHELLS, ids=lambda s: s.name)
def test_the_hub_switch_is_hf_hub_offline(shell_: Shell) -> None:
    made = new_box(resolved(shell_), sealed_hub("org/tiny", "a" * 40, {"config.json": b"{}\n"}))
    try:
        env = job_env(made.run("env", BAKE_OFFLINE=1, HF_HOME=made.root / "hf"))
        assert env["HF_HUB_OFFLINE"] == "1"
    finally:
        shutil.rmtree(made.root)
