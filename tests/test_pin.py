"""``bake pin``: which references it rewrites, that it keeps every other byte, ``--check``, the registry.

The parser cases and the hypothesis property need nothing but Python; the command-line tests
ask the toolchain's real registry (127.0.0.1:5000) for the published image, each in a
repository of its own.
"""

from __future__ import annotations

import os
import stat
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bake.errors import UsageError
from bake.pin import BlockLine, StalePin, find_references, pin_block, pin_files, pin_text
from tests.baked import FILES, write_manifest
from tests.registries import REGISTRY, publish_files
from tests.runners import bake

REPO = "registry.example:5000/vllm-ci/bake-assets"
TAG = "c45ecfeac55e114146812982c9308fd516a1f64b3728fde7469a180728e63706"
DIGEST = "sha256:" + "d" * 64
PINNED = f"{REPO}:{TAG}@{DIGEST}"
OLD_DIGEST = "sha256:" + "0" * 64


def pinned(text: str, repository: str = REPO) -> str:
    return pin_text(text, find_references(text, repository), PINNED)


# ---- which references, and only those --------------------------------------------------------

REWRITTEN = {
    "FROM bare": (f"FROM {REPO}\n", f"FROM {PINNED}\n"),
    "FROM tagged, AS": (f"FROM {REPO}:v1 AS bake-assets\n", f"FROM {PINNED} AS bake-assets\n"),
    "FROM --platform, digested": (
        f"FROM --platform=linux/amd64 {REPO}@{OLD_DIGEST}\n",
        f"FROM --platform=linux/amd64 {PINNED}\n",
    ),
    "from, lower case": (f"from {REPO}:x as a\n", f"from {PINNED} as a\n"),
    "COPY --from tagged and digested": (
        f"COPY --link --from={REPO}:old@{OLD_DIGEST} / /\n",
        f"COPY --link --from={PINNED} / /\n",
    ),
    "COPY --from quoted": (f'COPY --from="{REPO}" / /\n', f'COPY --from="{PINNED}" / /\n'),
    "RUN --mount quoted": (
        f'RUN --mount="type=bind,from={REPO}:x,target=/m" true\n',
        f'RUN --mount="type=bind,from={PINNED},target=/m" true\n',
    ),
    "ARG default": (f"ARG BAKE_ASSETS={REPO}:v2\n", f"ARG BAKE_ASSETS={PINNED}\n"),
    "ARG defaults, quoted, two in one": (
        f"ARG A=\"{REPO}\" B='{REPO}:t'\n",
        f"ARG A=\"{PINNED}\" B='{PINNED}'\n",
    ),
    "CRLF and a continuation with a comment inside": (
        f"FROM base AS ci_base\r\nCOPY --link \\\r\n# a note\r\n    --from={REPO} / /\r\n",
        f"FROM base AS ci_base\r\nCOPY --link \\\r\n# a note\r\n    --from={PINNED} / /\r\n",
    ),
    "backslash followed by blanks, then an empty line": (
        f"COPY \\  \n\n  --from={REPO} / /\n",
        f"COPY \\  \n\n  --from={PINNED} / /\n",
    ),
    "escape directive": (
        f"# escape=`\nFROM base\nCOPY `\n  --from={REPO} / /\n",
        f"# escape=`\nFROM base\nCOPY `\n  --from={PINNED} / /\n",
    ),
    "no final newline": (f"FROM {REPO}", f"FROM {PINNED}"),
    "already pinned": (f"FROM {PINNED}\n", f"FROM {PINNED}\n"),
}


@pytest.mark.parametrize(("before", "after"), REWRITTEN.values(), ids=REWRITTEN.keys())
def test_every_kind_of_reference_is_rewritten(before: str, after: str) -> None:
    assert pinned(before) == after


UNTOUCHED = {
    "repository sharing a prefix": f"COPY --from={REPO}-runtime:1 / /\n",
    "repository one level down": f"FROM {REPO}/sub:1\n",
    "repository one character longer": f"ARG X={REPO}x\n",
    "repository ending in this one": f"FROM mirror.example/{REPO}\n",
    "a parent repository": f"FROM {REPO.rsplit('/', 1)[0]}:1\n",
    "a comment": f"# FROM {REPO}\n",
    "a RUN line": f"RUN echo {REPO}\n",
    "a heredoc body": f"RUN <<EOF\nFROM {REPO}\nEOF\nCOPY <<-END /x\n\tFROM {REPO}\n\tEND\n",
    "an ARG without a default": "ARG BAKE_ASSETS\n",
    "a label": f'LABEL src="{REPO}"\n',
}


@pytest.mark.parametrize("text", UNTOUCHED.values(), ids=UNTOUCHED.keys())
def test_other_text_is_not_a_reference(text: str) -> None:
    assert find_references(text, REPO) == []


def test_references_carry_their_line_and_text() -> None:
    text = f"ARG A=1\n\nFROM {REPO}:v1 AS a\r\nCOPY \\\n  --from={REPO} / /\n"
    found = find_references(text, REPO)
    assert [(r.line, r.seen) for r in found] == [(3, f"{REPO}:v1"), (5, REPO)]
    assert [text[r.start : r.end] for r in found] == [r.seen for r in found]


REFUSED = {
    "a variable tag": (f"FROM {REPO}:${{TAG}}\n", "df:1:"),
    "a short digest": (f"ARG X={REPO}@sha256:abc\n", "df:1:"),
    "split across lines": (f"COPY --from={REPO}\\\n:tag / /\n", "split across lines"),
    "a --mount with CSV quotes": (f"RUN --mount='type=bind,\"from={REPO}\"' true\n", "CSV quotes"),
    "a quote inside an ARG value": (f'ARG X="{REPO}":v1\n', "written out"),
}


@pytest.mark.parametrize(("text", "says"), REFUSED.values(), ids=REFUSED.keys())
def test_a_reference_pin_cannot_rewrite_in_place_is_a_usage_error(text: str, says: str) -> None:
    with pytest.raises(UsageError, match=says):
        find_references(text, REPO, "df")


# ---- the property: every other byte is kept ---------------------------------------------------


@dataclass(frozen=True)
class Piece:
    """A piece of a generated Dockerfile: its text with REF where a reference goes, and that reference."""

    template: str
    reference: str | None = None

    def render(self, pinned_ref: str | None = None) -> str:
        ref = self.reference or ""
        if pinned_ref is not None and ref and (ref == REPO or ref.startswith((f"{REPO}:", f"{REPO}@"))):
            ref = pinned_ref
        return self.template.replace("\x00", ref)


EOL = st.sampled_from(["\n", "\r\n"])
WS = st.sampled_from([" ", "  ", "\t", " \t "])
WORD = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-", min_size=1, max_size=8)
ARG_NAME = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True)
NOTE = st.text(
    alphabet=st.characters(blacklist_characters="\r\n\x00", blacklist_categories=("Cs",)), max_size=30
)
OURS = st.sampled_from([REPO, f"{REPO}:v1", f"{REPO}@{OLD_DIGEST}", f"{REPO}:old@{OLD_DIGEST}", PINNED])
THEIRS = st.sampled_from(
    [f"{REPO}-runtime:1", f"{REPO}/sub", f"{REPO}x", f"other.example/{REPO}", "debian:bookworm", "base"]
)
REFERENCE = st.one_of(OURS, THEIRS)


@st.composite
def piece(draw: st.DrawFn) -> Piece:
    """One instruction or comment, with random spacing, line ending and continuation lines."""
    eol, ws = draw(EOL), draw(WS)
    ref = draw(REFERENCE)
    kind = draw(st.sampled_from(["from", "copy", "arg", "comment", "run", "heredoc", "blank"]))
    if kind == "from":
        flag = draw(st.sampled_from(["", f"--platform=linux/amd64{ws}"]))
        alias = draw(st.one_of(st.just(""), WORD.map(lambda w: f"{ws}AS{ws}{w}")))
        return Piece(f"FROM{ws}{flag}\x00{alias}{eol}", ref)
    if kind == "copy":
        joint = draw(st.sampled_from([ws, f"{ws}\\{eol}", f" \\{eol}# {draw(NOTE)}{eol}{ws}"]))
        return Piece(f"COPY{ws}--link{joint}--from=\x00{ws}/{ws}/{eol}", ref)
    if kind == "arg":
        quote = draw(st.sampled_from(["", '"', "'"]))
        return Piece(f"ARG{ws}{draw(ARG_NAME)}={quote}\x00{quote}{eol}", ref)
    if kind == "comment":
        return Piece(f"#{ws}{draw(NOTE)} \x00{eol}", ref)
    if kind == "run":
        return Piece(f"RUN{ws}echo \x00 {draw(NOTE)};{eol}", ref)  # ";": no escape ends the line
    if kind == "heredoc":
        return Piece(f"RUN <<EOT{eol}FROM \x00{eol}COPY --from=\x00 / /{eol}EOT{eol}", ref)
    return Piece(f"{ws}{eol}")


# Pure Python and quick: more examples than the CLI properties, a fixed seed under CI.
@settings(max_examples=300, deadline=None, derandomize=os.environ.get("CI") == "true")
@given(st.lists(piece(), max_size=12))
def test_pin_changes_only_the_references(pieces: list[Piece]) -> None:
    """Pinning equals the same file rendered with the pin in each reference slot: not one other byte."""
    before = "".join(p.render() for p in pieces)
    inert = ("#", "RUN")  # comments, RUN lines and heredoc bodies hold text, not references
    expected = "".join(
        p.render(None if p.template.lstrip(" \t").startswith(inert) else PINNED) for p in pieces
    )
    after = pinned(before)
    assert after == expected
    assert pinned(after) == after  # pinning is idempotent
    assert all(r.seen == PINNED for r in find_references(after, REPO))


# ---- files: what is written, what --check says ------------------------------------------------

STALE = f"FROM base AS ci_base\r\nCOPY --link --from={REPO}:v1 / /\r\n# keep me\r\nARG X={REPO}\r\n"


def test_pinning_writes_only_the_references_and_keeps_the_mode(tmp_path: Path) -> None:
    dockerfile = tmp_path / "Dockerfile.rocm"
    dockerfile.write_bytes(STALE.encode() + b"# \xff not UTF-8\n")
    dockerfile.chmod(0o640)
    (result,) = pin_files([dockerfile], REPO, PINNED, check=False)
    assert [line.split(": ", 1)[0] for line in result.stale] == [f"{dockerfile}:2", f"{dockerfile}:4"]
    assert dockerfile.read_bytes() == pinned(STALE).encode() + b"# \xff not UTF-8\n"
    assert stat.S_IMODE(dockerfile.stat().st_mode) == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["Dockerfile.rocm"]  # no staging file left


def test_a_symlinked_dockerfile_changes_its_target_and_stays_a_link(tmp_path: Path) -> None:
    target = tmp_path / "real.Dockerfile"
    target.write_text(STALE)
    link = tmp_path / "Dockerfile"
    link.symlink_to(target.name)
    pin_files([link], REPO, PINNED, check=False)
    assert link.is_symlink() and target.read_bytes() == pinned(STALE).encode()


def test_check_writes_nothing_and_names_each_stale_line(tmp_path: Path) -> None:
    dockerfile = tmp_path / "Dockerfile.rocm"
    dockerfile.write_text(STALE)
    before = dockerfile.stat().st_mtime_ns
    with pytest.raises(StalePin) as caught:
        pin_files([dockerfile], REPO, PINNED, check=True)
    assert caught.value.exit_code == 1
    assert f"{dockerfile}:2: {REPO}:v1 → {PINNED}" in str(caught.value)
    assert f"{dockerfile}:4: {REPO} → {PINNED}" in str(caught.value)
    assert dockerfile.read_bytes() == STALE.encode() and dockerfile.stat().st_mtime_ns == before


def test_a_file_without_a_reference_is_refused_and_no_file_is_written(tmp_path: Path) -> None:
    good, bare = tmp_path / "a.Dockerfile", tmp_path / "b.Dockerfile"
    good.write_text(STALE)
    bare.write_text("FROM base\n")
    with pytest.raises(UsageError, match=f"b.Dockerfile: no reference to {REPO}"):
        pin_files([good, bare], REPO, PINNED, check=False)
    assert good.read_bytes() == STALE.encode()


# ---- the block: one line per unit, then the index -----------------------------------------------


def unit_ref(name: str, key: str) -> str:
    return f"{REPO}:unit-{name}-{key * 64}@sha256:{key * 64}"


INDEX = f"{REPO}:index-{TAG}@{DIGEST}"
WHOLE = f"{REPO}:{TAG}@{DIGEST}"


def blocked(text: str, block: list[BlockLine]) -> tuple[str, list[str]]:
    return pin_block(text, find_references(text, REPO), REPO, block, WHOLE, "D")


def block_of(*units: tuple[str, str]) -> list[BlockLine]:
    return [*(BlockLine(name, unit_ref(name, key)) for name, key in units), BlockLine(None, INDEX)]


def copy(ref: str, indent: str = "") -> str:
    return f"{indent}COPY --link --from={ref} / /\n"


def test_a_bare_placeholder_becomes_the_block_in_its_form_and_place() -> None:
    text = f"FROM base\nRUN heavy\n  copy --link --from={REPO} / /\r\nENV X=1\n"
    new, stale = blocked(text, block_of(("asset.a", "a"), ("hub.m.0123", "b")))
    lines = [
        f"  copy --link --from={ref} / /\r\n"
        for ref in (unit_ref("asset.a", "a"), unit_ref("hub.m.0123", "b"))
    ]
    assert new == "FROM base\nRUN heavy\n" + "".join(lines) + f"  copy --link --from={INDEX} / /\r\nENV X=1\n"
    assert len(stale) == 3 and all(line.startswith("D:3: ") for line in stale)
    assert blocked(new, block_of(("asset.a", "a"), ("hub.m.0123", "b"))) == (new, [])


def test_unchanged_units_keep_their_lines_and_order_and_a_new_unit_goes_before_the_index() -> None:
    # The file's order (b before a) is kept, though the manifest lists a first.
    old = (
        copy(unit_ref("b", "1"))
        + copy(unit_ref("gone", "2"))
        + copy(unit_ref("a", "3"))
        + copy(f"{REPO}:index-x")
    )
    text = "FROM base\n" + old + "ENV X=1"
    new, stale = blocked(text, block_of(("a", "4"), ("new", "5"), ("b", "1")))
    expected = copy(unit_ref("b", "1")) + copy(unit_ref("a", "4")) + copy(unit_ref("new", "5")) + copy(INDEX)
    assert new == "FROM base\n" + expected + "ENV X=1"
    assert stale == [
        f"D:3: {unit_ref('gone', '2')} → nothing: no such unit in the selection, the line goes",
        f"D:4: {unit_ref('a', '3')} → {unit_ref('a', '4')}",
        f"D:5: no line for unit new → {unit_ref('new', '5')}",
        f"D:5: {REPO}:index-x → {INDEX} (the block's last line)",
    ]


def test_other_references_pin_to_the_whole_image_and_a_last_line_keeps_having_no_newline() -> None:
    text = f"FROM {REPO}:v1 AS assets\nFROM base\nCOPY --from={REPO} / /"
    new, stale = blocked(text, block_of(("a", "1")))
    unit = f"COPY --from={unit_ref('a', '1')} / /\n"
    assert new == f"FROM {WHOLE} AS assets\nFROM base\n" + unit + f"COPY --from={INDEX} / /"
    assert stale[0] == f"D:1: {REPO}:v1 → {WHOLE}"


def test_two_lines_for_one_unit_are_refused() -> None:
    text = copy(unit_ref("a", "1")) + copy(unit_ref("a", "2"))
    with pytest.raises(UsageError, match="D:2: a second block line for unit a \\(line 1 is the first\\)"):
        blocked(text, block_of(("a", "1")))


def test_check_names_each_stale_block_line(tmp_path: Path) -> None:
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(copy(unit_ref("a", "1")) + copy(f"{REPO}:index-x"))
    with pytest.raises(StalePin) as caught:
        pin_files([dockerfile], REPO, WHOLE, check=True, block=block_of(("a", "2")))
    assert f"{dockerfile}:1: {unit_ref('a', '1')} → {unit_ref('a', '2')}" in str(caught.value)
    assert f"{dockerfile}:2: {REPO}:index-x → {INDEX}" in str(caught.value)
    (result,) = pin_files([dockerfile], REPO, WHOLE, check=False, block=block_of(("a", "2")))
    assert dockerfile.read_text() == copy(unit_ref("a", "2")) + copy(INDEX) and len(result.stale) == 2


# ---- the command, against the real registry -------------------------------------------------


@dataclass(frozen=True)
class Published:
    manifest: Path
    repo: str
    units: tuple[str, ...]  # the unit lines' references, pinned
    index: str
    whole: str


@pytest.fixture
def published(engine: None, tmp_path: Path) -> Published:
    """A manifest, a repository of its own, and each image of its --group vllm selection published."""
    manifest = write_manifest(tmp_path / "assets.toml")
    repo = f"{REGISTRY}/bake-test/pin-{uuid.uuid4().hex[:12]}"
    block = publish_files(manifest, repo, ["vllm"], FILES)
    units = tuple(found.pinned for _, found in block.units)
    return Published(manifest, repo, units, block.index.pinned, block.whole.pinned)


@pytest.mark.docker
def test_pin_then_check_through_the_cli(published: Published, tmp_path: Path) -> None:
    repo = published.repo
    dockerfile = tmp_path / "Dockerfile.rocm"
    dockerfile.write_text(STALE.replace(REPO, repo))
    selection = ["--manifest", str(published.manifest), "--repository", repo, "--group", "vllm"]

    stale = bake("pin", "--check", *selection, str(dockerfile), cwd=tmp_path)
    assert stale.returncode == 1, stale.stderr
    assert f"{dockerfile}:2: {repo}:v1 → {published.index} (the block's last line)" in stale.stderr
    assert f"{dockerfile}:4: {repo} → {published.whole}" in stale.stderr

    done = bake("pin", *selection, str(dockerfile), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    block = "".join(f"COPY --link --from={ref} / /\r\n" for ref in (*published.units, published.index))
    expected = STALE.replace(f"COPY --link --from={REPO}:v1 / /\r\n", block).replace(
        f"X={REPO}", f"X={published.whole}"
    )
    assert dockerfile.read_bytes() == expected.encode()
    assert len(published.units) == 1  # --group vllm: the vocab alone

    current = bake("pin", "--check", *selection, str(dockerfile), cwd=tmp_path)
    assert current.returncode == 0, current.stderr


@pytest.mark.docker
def test_a_manifest_with_no_published_image_is_exit_5_saying_publish_first(
    published: Published, tmp_path: Path
) -> None:
    manifest, repo = published.manifest, published.repo
    dockerfile = tmp_path / "Dockerfile.rocm"
    dockerfile.write_text(f"COPY --from={repo} / /\n")
    # Without --group the digest differs: those tags were never published.
    proc = bake("pin", "--manifest", str(manifest), "--repository", repo, str(dockerfile), cwd=tmp_path)
    assert proc.returncode == 5, proc.stderr
    assert f"run `bake publish --manifest {manifest} --repository {repo}` first" in proc.stderr
    assert dockerfile.read_text() == f"COPY --from={repo} / /\n"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (
            ["--runtime", "--manifest", "m.toml", "--repository", "r.example/x"],
            "takes no --manifest or --group",
        ),
        (["--repository", "r.example/x:v1"], "without a tag or digest"),
        ([], "the following arguments are required: --repository"),
    ],
    ids=["runtime with a manifest", "a tagged repository", "no repository"],
)
def test_pin_usage_errors_are_exit_2_before_the_registry(args: list[str], says: str, tmp_path: Path) -> None:
    proc = bake("pin", *args, "Dockerfile", cwd=tmp_path, env={"DOCKER_HOST": "unix:///nonexistent.sock"})
    assert proc.returncode == 2 and says in proc.stderr, proc.stderr
