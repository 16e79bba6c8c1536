"""The entrypoint's functions one at a time, under dash and busybox sh.

The script is sourced with ``_BAKE_SOURCED=1`` (a variable only these tests set), so that
``_main`` does not run; ``_init`` sets the run's state, ``_load_serve`` reads the head of
bake.serve, and one function is called with its arguments, nothing of the script's declared
first. These are the functions that decide what a location is and how it is served; the
whole-script runs are in tests/test_entrypoint.py.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.serve import SCRIPT, Box, content, sealed, shell_and_box

O200K = "fb374d419588a4632f3f557e76b4b70aebbca790"  # the SHA-1 of o200k_base's URL: tiktoken's name
FILES = {
    "s3tokenizer/speech_tokenizer_v3_25hz.onnx": content("v3", 3000),
    f"tiktoken/{O200K}": content("o200k", 1500),
    "whisper/base.pt": content("whisper", 1800),
}
URLS = {f"tiktoken/{O200K}": "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"}
DECLARED = {"whisper": "${XDG_CACHE_HOME:-$HOME/.cache}/whisper"}
CHECKPOINT = "speech_tokenizer_v3_25hz.onnx"


shell, box = shell_and_box(sealed(FILES, URLS, DECLARED))


def call(box: Box, body: str, **env: object) -> subprocess.CompletedProcess[str]:
    """Source the script in ``box``'s shell, set the run's state and load its bake.serve, then run
    ``body``; its result."""
    script = f'. "$0"\n_init\n_load_serve\n{body}\n'
    return subprocess.run(
        [*box.shell.argv, "-c", script, str(SCRIPT)],
        env=box.env(_BAKE_SOURCED=1, **env),
        cwd=box.root,
        capture_output=True,
        text=True,
        timeout=60,
    )


def out(box: Box, body: str, **env: object) -> str:
    """What ``body`` prints, after checking it ran to the end."""
    result = call(box, body, **env)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def status(box: Box, body: str, **env: object) -> int:
    """The status ``body`` (one function call) returns."""
    return int(out(box, f"{body} && echo 0 || echo $?", **env))


def test_sourcing_runs_nothing(box: Box) -> None:
    result = call(box, "echo sourced")

    assert (result.returncode, result.stdout, result.stderr) == (0, "sourced\n", "")
    assert list(box.home.iterdir()) == [] and list(box.tmp.iterdir()) == []


@pytest.mark.parametrize(
    ("line", "kept"),
    [
        ("loc\tx.0\tc\texport\tVV", "loc x.0 c export VV"),
        ("loc\tx.0\tc\tunder\tVV\t\t/x", "loc x.0 c under VV  /x"),
        ("\tloc\tx.0\tc\texport\tVV", ""),
    ],
    ids=["no empty field", "an empty field between two", "an empty first field: a kind no one reads"],
)
def test_load_record_keeps_every_field_where_it_is(box: Box, line: str, kept: str) -> None:
    # An empty field is never dropped, which would shift the fields after it into other roles.
    body = f"_head=''; _load_record \"$(printf '{line}')\"; printf '%s' \"$_head\""

    assert out(box, body).replace("\x1f", " ") == kept


# --- what a location is ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("loc", "env", "expected"),
    [
        ("s3tokenizer.0", {"XDG_CACHE_HOME": "/x/cache"}, "/x/cache/s3tokenizer"),
        ("s3tokenizer.0", {}, "HOME/.cache/s3tokenizer"),
        ("s3tokenizer.0", {"XDG_CACHE_HOME": "rel"}, "ROOT/rel/s3tokenizer"),
        ("tiktoken.0", {"TIKTOKEN_RS_CACHE_DIR": "/x/rs"}, "/x/rs"),
        ("tiktoken.1", {}, ""),
    ],
    ids=["set", "fallback $HOME", "relative to the working directory", "export", "export unset"],
)
def test_resolve_names_the_directory_a_consumer_looks_in(
    box: Box, loc: str, env: dict[str, str], expected: str
) -> None:
    seen = out(box, f'_resolve {loc}; printf "%s" "$_resolved"', **env)

    assert seen == expected.replace("HOME", str(box.home)).replace("ROOT", str(box.root))


def test_resolve_exports_a_variable_set_but_empty_as_the_directory_it_serves(box: Box) -> None:
    body = '_resolve s3tokenizer.0; printf "%s|%s" "$_resolved" "$XDG_CACHE_HOME"'

    seen = out(box, body, XDG_CACHE_HOME="")

    assert seen == f"{box.home}/.cache/s3tokenizer|{box.home}/.cache"


@pytest.mark.parametrize(
    ("where", "kind"),
    [("ROOT", "own"), ("/dev/shm", "tmpfs"), ("/proc", "node")],
    ids=["the mount / is on", "a tmpfs", "another filesystem"],
)
def test_fs_kind_tells_the_three_kinds_of_filesystem_apart(box: Box, where: str, kind: str) -> None:
    if not Path(where.replace("ROOT", "/")).is_dir():
        pytest.fail(f"{where} is not a directory on this machine: the test needs one")

    assert out(box, f'_fs_kind "{where.replace("ROOT", str(box.root))}"; echo "$_kind"') == kind


def test_mount_id_opens_no_fifo_and_knows_no_missing_path(box: Box) -> None:
    os.mkfifo(box.root / "fifo")

    body = (
        '_mount_id /; a=$_mnt; _mount_id "$PWD"; b=$_mnt; _mount_id /proc; c=$_mnt\n'
        '_mount_id "$PWD/fifo"; d=$_mnt; _mount_id "$PWD/none"; echo "$a|$b|$c|$d|$_mnt"'
    )

    seen = out(box, body)

    root, here, proc, fifo, missing = seen.split("|")
    assert root.isdigit() and here == root and proc.isdigit() and proc != root
    assert (fifo, missing) == ("", "")


@pytest.mark.parametrize(
    ("path", "made"),
    [
        ("TMP/bake-XDG_CACHE_HOME.12.1", True),
        ("TMP/bake-XDG_CACHE_HOME.AbC123", True),
        ("TMP/bake-X.1/sub", False),
        ("TMP/other", False),
        ("ROOT/bake-X.1", False),
    ],
    ids=["by pid", "by mktemp", "inside one", "another name", "outside TMPDIR"],
)
def test_was_job_local_knows_an_entrypoints_job_local_directory_by_its_name(
    box: Box, path: str, made: bool
) -> None:
    path = path.replace("TMP", str(box.tmp)).replace("ROOT", str(box.root))

    assert status(box, f'_was_job_local "{path}"') == (0 if made else 1)


def test_is_job_local_is_true_only_for_this_jobs_directories_and_never_through_a_link(box: Box) -> None:
    (box.root / "elsewhere").mkdir()
    body = (
        '_job_dir HF_HOME; made=$_made; ln -s "$PWD/elsewhere" "$made/linked"; mkdir "$made/real"\n'
        'for p in "$made" "$made/real/x" "$made/linked/x" "$TMPDIR/bake-HF_HOME.1.1"; do\n'
        '  if _is_job_local "$p"; then echo yes; else echo no; fi\ndone'
    )

    assert out(box, body).split() == ["yes", "yes", "no", "no"]


def test_job_dir_makes_a_private_directory_and_a_missing_tmpdir_as_mkdir_p_would(box: Box) -> None:
    tmp = box.root / "fresh" / "tmp"

    made = Path(out(box, '_job_dir TIKTOKEN_CACHE_DIR; echo "$_made"', TMPDIR=tmp))

    assert made.parent == tmp and made.name.startswith("bake-TIKTOKEN_CACHE_DIR.")
    assert made.stat().st_mode & 0o777 == 0o700
    assert tmp.stat().st_mode & 0o777 == 0o777 & ~0o022  # the test runs with umask 022


def test_job_dir_of_an_image_directory_is_private_and_links_each_entry_in_one_cp(box: Box) -> None:
    tmp = box.root / "fresh" / "tmp"
    source = box.assets / "tiktoken"

    made = Path(out(box, f'_job_dir TIKTOKEN_CACHE_DIR "{source}"; echo "$_made"', TMPDIR=tmp))

    assert made.parent == tmp and made.name.startswith("bake-TIKTOKEN_CACHE_DIR.")
    assert made.is_dir() and not made.is_symlink() and made.stat().st_mode & 0o777 == 0o700
    if box.shell.tool == "busybox":  # busybox's cp has no --no-preserve: mkdir, and the links later
        assert list(made.iterdir()) == []
        return
    # The vocab, and its alias link beside it in the image, each a link into the image.
    assert sorted(p.name for p in made.iterdir()) == sorted([O200K, "o200k_base.tiktoken"])
    assert all((made / name).is_symlink() for name in (O200K, "o200k_base.tiktoken"))
    assert (made / "o200k_base.tiktoken").samefile(source / O200K)


def test_a_cp_that_cannot_make_links_is_tried_once_per_start(box: Box) -> None:
    # Two job-local directories and a new location, each one cp where cp can; busybox's cp has no
    # --no-preserve, so after its first failure mkdir and ln make the rest, with no cp tried again.
    calls = box.root / "cp-calls"
    real = (box.bin / "cp").resolve()
    (box.bin / "cp").unlink()
    applet = " cp" if box.shell.tool else ""
    (box.bin / "cp").write_text(f'#!/bin/sh\necho "$*" >>"{calls}"\nexec "{real}"{applet} "$@"\n')
    (box.bin / "cp").chmod(0o755)
    body = (
        f'_job_dir A "{box.assets}/tiktoken"; _job_dir B "{box.assets}/tiktoken"\n'
        f'_linked_new "{box.root}/fresh" s3tokenizer || :\n'
        'echo "${_cp_rs_failed:-none}"'
    )

    failed = out(box, body)

    tried = calls.read_text().splitlines()
    made = sorted(box.tmp.iterdir())
    assert [p.name.split(".")[0] for p in made] == ["bake-A", "bake-B"]
    assert all(p.is_dir() and p.stat().st_mode & 0o777 == 0o700 for p in made)
    if box.shell.tool == "busybox":
        assert (failed, len(tried)) == ("1", 1) and not (box.root / "fresh").exists()
    else:
        assert (failed, len(tried)) == ("none", 3) and (box.root / "fresh" / CHECKPOINT).is_symlink()


@pytest.mark.parametrize("planted", ["directory", "link"])
def test_job_dir_never_copies_into_a_name_taken_before_it(box: Box, planted: str) -> None:
    # Another job's directory, or a link to one, at the name this shell's pid gives: left as it is.
    elsewhere = box.root / "elsewhere"
    elsewhere.mkdir()
    tmp = box.root / "tmp"
    plant = {"directory": 'mkdir "$TMPDIR/bake-V.$$.1"', "link": f'ln -s "{elsewhere}" "$TMPDIR/bake-V.$$.1"'}
    body = f'{plant[planted]}; _job_dir V "{box.assets}/tiktoken"; echo "$_made"'

    made = Path(out(box, body, TMPDIR=tmp))

    taken = [p for p in tmp.iterdir() if p != made]
    assert len(taken) == 1 and taken[0].name.endswith(".1") and made.name != taken[0].name
    assert list(elsewhere.iterdir()) == [] and (planted == "link" or list(taken[0].iterdir()) == [])
    assert made.is_dir() and not made.is_symlink() and made.stat().st_mode & 0o777 == 0o700


def test_one_source_takes_alias_links_only_where_asked(box: Box) -> None:
    # tiktoken's directory in the image holds the vocab and its o200k_base.tiktoken alias link.
    body = 'for a in "" 1; do if _one_source tiktoken "$a"; then echo "$_source"; else echo no; fi; done'

    assert out(box, body).split("\n") == ["no", f"{box.assets}/tiktoken"]


@pytest.mark.parametrize(
    ("entries", "empty"),
    [([], True), ([".bake/"], True), (["data"], False), ([".hidden"], False), (["..odd"], False)],
    ids=["nothing", "bake's state only", "a file", "a hidden file", "a name starting with .."],
)
def test_empty_sees_every_entry_but_bakes_own(box: Box, entries: list[str], empty: bool) -> None:
    where = box.root / "loc"
    where.mkdir()
    for name in entries:
        (where / name.rstrip("/")).mkdir() if name.endswith("/") else (where / name).write_text("x")

    assert status(box, f'_empty "{where}" .bake') == (0 if empty else 1)


def test_state_ok_wants_bakes_directories_real_all_the_way(box: Box) -> None:
    (box.root / "a" / ".locks" / ".bake").mkdir(parents=True)
    (box.root / "b" / ".locks").mkdir(parents=True)
    (box.root / "b" / ".locks" / ".bake").symlink_to(box.root / "a" / ".locks" / ".bake")

    assert status(box, f'_state_ok "{box.root}/a" .locks/.bake') == 0
    assert status(box, f'_state_ok "{box.root}/b" .locks/.bake') == 1
    assert status(box, f'_state_ok "{box.root}/c" .bake') == 1


# --- how it is served -----------------------------------------------------------------------------


def test_where_makes_a_missing_location_on_the_containers_filesystem_linked(box: Box) -> None:
    loc = box.root / "cache" / "s3tokenizer"
    loc.parent.mkdir()

    seen = out(box, f'_where "{loc}" s3tokenizer; echo "$_view"')

    assert loc.is_dir() and not loc.is_symlink()
    if box.shell.tool == "busybox":  # busybox's cp has no --no-preserve: made by mkdir, linked next
        assert seen == "linked"
        return
    assert seen == "made"  # made whole by one cp: the directory and its link
    assert os.readlink(loc / CHECKPOINT) == f"{box.assets}/s3tokenizer/{CHECKPOINT}"


def test_where_gives_a_directory_holding_data_the_copied_view(box: Box) -> None:
    loc = box.root / "data"
    loc.mkdir()
    (loc / "theirs.bin").write_text("x")

    assert out(box, f'_where "{loc}" s3tokenizer; echo "$_view"') == "copied"


def test_where_leaves_a_file_where_a_directory_belongs(box: Box) -> None:
    loc = box.root / "file"
    loc.write_text("x")

    assert status(box, f'_where "{loc}" s3tokenizer') == 4  # _NOT_A_DIR
    assert loc.read_text() == "x"


def test_where_replaces_a_dangling_link_on_the_containers_filesystem(box: Box) -> None:
    loc = box.root / "dangling"
    loc.symlink_to(box.root / "gone")

    assert out(box, f'_where "{loc}" s3tokenizer; echo "$_view"') == "linked"
    assert loc.is_dir() and not loc.is_symlink()


def test_linked_new_makes_the_directory_and_its_links_in_one_go_where_cp_can(box: Box) -> None:
    loc = box.root / "fresh"

    made = status(box, f'_linked_new "{loc}" s3tokenizer')

    if box.shell.tool == "busybox":  # busybox's cp has no --no-preserve: mkdir and ln do it
        assert made == 1 and not loc.exists()
        return
    assert made == 0
    assert loc.stat().st_mode & 0o777 == 0o755  # what mkdir makes under umask 022
    link = loc / CHECKPOINT
    assert os.readlink(link) == f"{box.assets}/s3tokenizer/{CHECKPOINT}"


def test_linked_new_declines_a_directory_the_placements_do_not_cover_whole(box: Box) -> None:
    # tiktoken's directory in the image also holds the o200k_base.tiktoken alias, which is not served.
    loc = box.root / "fresh"

    assert status(box, f'_linked_new "{loc}" tiktoken') == 1
    assert not loc.exists()


def test_in_place_proves_links_all_or_one_with_no_process(box: Box) -> None:
    loc = box.root / "loc"
    loc.mkdir()
    body = (
        f'for one in "" one; do if _in_place "{loc}" s3tokenizer "$one"; then echo y; else echo n; fi; done'
    )

    assert out(box, body).split() == ["n", "n"]
    (loc / CHECKPOINT).symlink_to(box.assets / "s3tokenizer" / CHECKPOINT)
    assert out(box, body).split() == ["y", "y"]
    (loc / CHECKPOINT).unlink()
    (loc / CHECKPOINT).symlink_to(box.assets / "whisper" / "base.pt")  # a link to another file
    assert out(box, body).split() == ["n", "n"]


@pytest.mark.parametrize("writer", ["the entrypoint (a linked view)", "bake seed (a copied view)"])
def test_stamped_holds_while_the_directories_are_as_recorded(box: Box, writer: str) -> None:
    loc = box.root / "loc"
    loc.mkdir()
    (loc / ".bake").mkdir()
    check = f'if _stamped "{loc}" s3tokenizer; then echo yes; else echo no; fi'
    assert out(box, check) == "no"
    if writer.startswith("bake seed"):
        (loc / "theirs.bin").write_text("x")  # node storage's view
        seeded = subprocess.run(
            [box.bin / "bake", "seed", "--assets", box.assets, "--consumer", "s3tokenizer", loc],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert seeded.returncode == 0, seeded.stderr
    else:
        (loc / CHECKPOINT).symlink_to(box.assets / "s3tokenizer" / CHECKPOINT)
        assert out(box, f'_dir_stats "{loc}" s3tokenizer linked; _stamp "{loc}" s3tokenizer "$_stats"') == ""

    assert out(box, check) == "yes"
    (loc / "another").write_text("x")
    assert out(box, check) == "no"


@pytest.mark.parametrize("view", ["linked", "copied"])
def test_serve_at_serves_either_view_and_a_second_call_finds_it_served(box: Box, view: str) -> None:
    loc = box.root / "loc"
    if view == "copied":
        loc.mkdir()
        (loc / "theirs.bin").write_text("x")  # holding data: node storage's view

    assert status(box, f'_serve_at "{loc}" s3tokenizer') == 0

    served = loc / CHECKPOINT
    assert served.is_symlink() == (view == "linked")
    assert served.read_bytes() == FILES[f"s3tokenizer/{CHECKPOINT}"]
    assert status(box, f'_serve_at "{loc}" s3tokenizer') == 0


# --- the checks that guard the shell's own evals and paths -----------------------------------------


@pytest.mark.parametrize(
    ("path", "plain"),
    [("a", True), ("a/b.c", True), ("", False), ("/a", False), ("a//b", False), ("a/./b", False),
     ("a/../b", False), ("..", False), ("a/", False)],
)  # fmt: skip
def test_plain_path(box: Box, path: str, plain: bool) -> None:
    assert status(box, f"_plain_path '{path}'") == (0 if plain else 1)


@pytest.mark.parametrize(
    ("var", "unsafe"),
    [("XDG_CACHE_HOME", False), ("_x1", False), ("PATH", True), ("LD_PRELOAD", True), ("BAKE_X", True),
     ("1A", True), ("A-B", True), ("", True), ("A;B", True)],
)  # fmt: skip
def test_unsafe_var(box: Box, var: str, unsafe: bool) -> None:
    assert status(box, f"_unsafe_var '{var}'") == (0 if unsafe else 1)


# --- the script's shape (issue 35's targets; issue 27's 900 lines could not be met in sh alone) --------

MAX_LINES = 1000
MAX_FUNCTION_LINES = 40
MAX_LOCALS = 12
MAX_GLOBALS = 15


def formatted() -> list[str]:
    """The script as shfmt prints it, so that a packed line does not count as one."""
    shfmt = shutil.which("shfmt")
    if shfmt is None:
        pytest.fail("shfmt is not installed: pip install -e '.[test]' (it brings shfmt-py)")
    done = subprocess.run([shfmt, str(SCRIPT)], capture_output=True, text=True, check=True)
    return done.stdout.splitlines()


def functions() -> dict[str, list[str]]:
    """Each function of the script, by name, as its lines (from `_name() {` to its closing `}`)."""
    found: dict[str, list[str]] = {}
    name = None
    for line in formatted():
        opened = re.match(r"^(_\w+)\(\) \{", line)
        if opened:
            name = opened.group(1)
            found[name] = []
        if name is not None:
            found[name].append(line)
            if line == "}":
                name = None
    return found


def locals_of(body: list[str]) -> list[str]:
    """The names a function declares with `local`."""
    names = []
    for line in body:
        if re.match(r"^\s*local ", line):
            words = shlex.split(line.split(" #")[0].strip())[1:]
            names += [word.split("=", 1)[0] for word in words]
    return names


def globals_set_by_main(box: Box) -> set[str]:
    """The names of the script's own variables (``_name``) that ``_main`` sets, in a fresh job."""
    script = '. "$0"; set >"$1"; trap \'set >"$2"\' EXIT; _main'
    before, after = box.root / "before", box.root / "after"
    result = subprocess.run(
        [*box.shell.argv, "-c", script, str(SCRIPT), str(before), str(after)],
        env=box.env(_BAKE_SOURCED=1, XDG_CACHE_HOME=box.root / "fresh" / "xdg"),
        cwd=box.root, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr

    def names(path: Path) -> set[str]:
        return {line.split("=", 1)[0] for line in path.read_text().splitlines() if line.startswith("_")}

    return names(after) - names(before) - {"_"}  # the shell's own last argument


def test_the_script_is_at_most_1000_lines_after_shfmt() -> None:
    assert len(formatted()) <= MAX_LINES


def test_no_function_is_over_40_lines() -> None:
    long = {name: len(body) for name, body in functions().items() if len(body) > MAX_FUNCTION_LINES}
    assert long == {}


def test_no_function_declares_more_than_12_locals() -> None:
    many = {name: locals_of(body) for name, body in functions().items() if len(locals_of(body)) > MAX_LOCALS}
    assert many == {}


def test_the_shape_checks_see_the_script() -> None:
    # The measures themselves: they must see every function and its locals, or the targets prove nothing.
    found = functions()
    assert len(found) > 50 and {"_main", "_serve_loc", "_copied", "_linked"} <= set(found)
    assert locals_of(found["_serve_loc"])[:2] == ["id", "dir"]


def test_a_unit_test_declares_none_of_the_scripts_internals() -> None:
    # What `call` runs before a body: the script sourced, the run's state, the head of bake.serve;
    # no local of the script's is declared by hand (round 4's tests had to declare 22 of them).
    import inspect

    prefix = inspect.getsource(call)
    assert "\\n_init\\n_load_serve\\n{body}" in prefix and "local" not in prefix


def test_main_sets_at_most_15_globals(box: Box) -> None:
    assert len(globals_set_by_main(box)) <= MAX_GLOBALS


def test_the_globals_count_sees_the_scripts_state(box: Box) -> None:
    # The measure itself: it must see the state every run keeps, or the target above proves nothing.
    assert {"_assets", "_unserved", "_exports"} <= globals_set_by_main(box)
