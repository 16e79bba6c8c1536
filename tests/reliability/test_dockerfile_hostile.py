"""Hostile Dockerfiles against ``bake/dockerfile.py``: ``bake pin`` reads a Dockerfile as BuildKit does.

The Dockerfile rules are BuildKit's parser (moby/buildkit v0.13, the frontend built into the
engine 26.1 the toolchain runs): ``frontend/dockerfile/parser/parser.go`` (the BOM on line 1,
continuation lines, comment lines inside them, heredocs after the instruction),
``directives.go`` (parser directives), ``split_command.go`` (flags), and ``shell/lex.go`` (the
words a heredoc is looked for in). The generated files below know by construction which
references BuildKit sees: the property needs no second parser. The engine's own BuildKit is
the oracle of the last two tests. (Round 4, issue 29: findings 2 and 3.)
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from bake.dockerfile import Unsure, instructions

from .pinning import OLD, PINNED, REPO, pin

pytestmark = pytest.mark.timeout(120)


# ---- finding 2: the BOM, directives, heredoc delimiters by BuildKit's rules -------------------

SEEN_AS_BUILDKIT_DOES = {
    "a BOM before FROM": (f"\ufeffFROM {REPO}:old\n", f"\ufeffFROM {PINNED}\n"),
    "a BOM before the escape directive": (
        f"\ufeff# escape=`\nFROM base\nRUN echo \\\nCOPY --from={REPO}:old / /\n",
        f"\ufeff# escape=`\nFROM base\nRUN echo \\\nCOPY --from={PINNED} / /\n",
    ),
    "a heredoc delimiter with a hyphen": (
        f"FROM base\nRUN <<END-OF-SCRIPT\nFROM {REPO}:old\nEND-OF-SCRIPT\nCOPY --from={REPO}:old / /\n",
        f"FROM base\nRUN <<END-OF-SCRIPT\nFROM {REPO}:old\nEND-OF-SCRIPT\nCOPY --from={PINNED} / /\n",
    ),
    "a quoted heredoc delimiter with hyphens": (
        f"FROM base\nRUN <<'E-O-F'\nFROM {REPO}:old\nE-O-F\nFROM {REPO}:old\n",
        f"FROM base\nRUN <<'E-O-F'\nFROM {REPO}:old\nE-O-F\nFROM {PINNED}\n",
    ),
    "a quoted <<": (
        f"FROM base\nRUN echo '<<EOF'\nCOPY --from={REPO}:old / /\n",
        f"FROM base\nRUN echo '<<EOF'\nCOPY --from={PINNED} / /\n",
    ),
    "shift arithmetic": (
        f"FROM base\nRUN echo $((1<<N))\nCOPY --from={REPO}:old / /\n",
        f"FROM base\nRUN echo $((1<<N))\nCOPY --from={PINNED} / /\n",
    ),
    "a << inside a word": (
        f"FROM base\nRUN cat x<<EOF\nCOPY --from={REPO}:old / /\n",
        f"FROM base\nRUN cat x<<EOF\nCOPY --from={PINNED} / /\n",
    ),
    "an escaped escape ends the line": (
        f"FROM base\nRUN echo \\\\\nCOPY --from={REPO}:old / /\n",
        f"FROM base\nRUN echo \\\\\nCOPY --from={PINNED} / /\n",
    ),
}


@pytest.mark.parametrize(
    ("before", "after"), SEEN_AS_BUILDKIT_DOES.values(), ids=SEEN_AS_BUILDKIT_DOES.keys()
)
def test_pin_reads_the_file_as_buildkit_does(tmp_path: Path, before: str, after: str) -> None:
    assert pin(tmp_path, before) == (after, None)


UNSURE = {
    "an unterminated heredoc": f"FROM {REPO}:old\nRUN <<EOF\necho hi\n",
    "a second escape directive": f"# escape=`\n# escape=\\\nFROM {REPO}:old\n",
    "an escape directive BuildKit refuses": f"# escape=x\nFROM {REPO}:old\n",
    "a JSON form that is not an array of strings": f"FROM {REPO}:old\nRUN [1, 2]\n",
    "a frontend older than heredocs": f"# syntax=docker/dockerfile:1.3\nFROM {REPO}:old\n",
    "a frontend named after a shebang": f"#!/bin/x\n# syntax=example.com/front\nFROM {REPO}:old\n",
    "an escape directive after a check directive": f"# check=skip=all\n# escape=`\nFROM {REPO}:old\n",
}


@pytest.mark.parametrize("text", UNSURE.values(), ids=UNSURE.keys())
def test_what_buildkit_would_refuse_is_exit_2_and_the_file_unchanged(tmp_path: Path, text: str) -> None:
    after, error = pin(tmp_path, text)
    assert after == text
    assert error is not None and "Dockerfile:" in str(error)


# ---- finding 3: every place BuildKit takes an image from -------------------------------------

EVERY_PLACE = {
    "RUN --mount from=": (
        f"FROM base\nRUN --mount=type=bind,from={REPO}:old,target=/m true\n",
        f"FROM base\nRUN --mount=type=bind,from={PINNED},target=/m true\n",
    ),
    "RUN --mount FROM= (keys are case-insensitive)": (
        f"FROM base\nRUN --mount=target=/m,FROM={REPO}:old,type=cache true\n",
        f"FROM base\nRUN --mount=target=/m,FROM={PINNED},type=cache true\n",
    ),
    "ONBUILD COPY --from=": (
        f"FROM base\nONBUILD COPY --from={REPO}:old / /\n",
        f"FROM base\nONBUILD COPY --from={PINNED} / /\n",
    ),
    "ONBUILD RUN --mount from=": (
        f"FROM base\nonbuild run --mount=from={REPO},target=/m true\n",
        f"FROM base\nonbuild run --mount=from={PINNED},target=/m true\n",
    ),
}


@pytest.mark.parametrize(("before", "after"), EVERY_PLACE.values(), ids=EVERY_PLACE.keys())
def test_mounts_and_onbuild_are_pinned(tmp_path: Path, before: str, after: str) -> None:
    assert pin(tmp_path, before) == (after, None)


# ---- the property: exactly the references BuildKit sees, or exit 2 and the file as it was ----


@dataclass(frozen=True)
class Piece:
    """Generated Dockerfile text; ``\\x00`` marks a reference BuildKit sees, ``\\x01`` one it does not."""

    text: str
    unsure: bool = False

    def render(self, ref: str, pinned: str | None) -> str:
        return self.text.replace("\x00", pinned or ref).replace("\x01", ref)


OURS = st.sampled_from([REPO, f"{REPO}:v1", f"{REPO}@{OLD}", f"{REPO}:old@{OLD}"])
DELIMITER = st.from_regex(r"[A-Za-z_][A-Za-z0-9_.-]{0,10}", fullmatch=True)
WS = st.sampled_from([" ", "  ", "\t"])


@st.composite
def header(draw: st.DrawFn) -> tuple[str, str]:
    """The file's start (a BOM, parser directives, a decoy) and the escape character in force."""
    bom = draw(st.sampled_from(["", "\ufeff"]))
    escape = draw(st.sampled_from(["\\", "`"]))
    directives = [f"#{draw(WS)}escape{draw(st.sampled_from(['=', ' = ']))}{escape}"]
    if draw(st.booleans()):
        directives.append("# syntax=docker/dockerfile:1")
    order = draw(st.permutations(directives))
    if escape == "\\" and draw(st.booleans()):
        order = ["# a comment ends the directives", "# escape=`"]  # not a directive any more
    return bom + "".join(f"{d}\n" for d in order) + "FROM base AS first\n", escape


@st.composite
def piece(draw: st.DrawFn, escape: str) -> Piece:
    ws = draw(WS)
    kind = draw(
        st.sampled_from(
            ["from", "copy", "mount", "onbuild", "arg", "continued", "heredoc", "two heredocs", "chomp",
             "not a heredoc", "comment", "shell text", "escaped escape", "unterminated"]
        )
    )  # fmt: skip
    if kind == "from":
        return Piece(f"FROM{ws}--platform=linux/amd64{ws}\x00{ws}AS s\n")
    if kind == "copy":
        return Piece(f'COPY --link --from="\x00"{ws}/ /\n')
    if kind == "mount":
        return Piece(f"RUN --mount=type=bind,from=\x00,target=/m{ws}true\n")
    if kind == "onbuild":
        return Piece(f"ONBUILD{ws}COPY --from=\x00 / /\n")
    if kind == "arg":
        return Piece("ARG A=\x00 B='\x00'\n")
    if kind == "continued":
        return Piece(f"COPY --link {escape}\n# a note {escape}\n\n{ws}--from=\x00 / /\n")
    if kind in ("heredoc", "chomp"):
        name = draw(DELIMITER)
        quote = draw(st.sampled_from(["", "'", '"']))
        dash, tabs = ("-", "\t\t") if kind == "chomp" else ("", "")
        opener = draw(
            st.sampled_from([f"RUN <<{dash}{quote}{name}{quote}", f"COPY <<{dash}{quote}{name}{quote} /x"])
        )
        return Piece(f"{opener}\nFROM \x01\nCOPY --from=\x01 / /\n{tabs}{name}x\n{tabs}{name}\n")
    if kind == "two heredocs":
        return Piece("RUN <<A-1 cat - <<'B 2'\nFROM \x01\nA-1\nFROM \x01\nB 2\n")
    if kind == "not a heredoc":
        text = draw(
            st.sampled_from(
                ["RUN echo '<<EOF'", "RUN echo $((1<<N))", "RUN cat x<<EOF", 'RUN ["sh", "<<EOF"]']
            )
        )
        return Piece(f"{text}\n")
    if kind == "comment":
        return Piece(f"{ws}# FROM \x01\n")
    if kind == "shell text":
        return Piece("RUN docker pull \x01 && echo FROM \x01\nLABEL x=\x01\n")
    if kind == "escaped escape":
        return Piece(f"RUN echo {escape}{escape}\n")
    return Piece("RUN <<EOF\necho no end\n", unsure=True)


@st.composite
def dockerfile(draw: st.DrawFn) -> tuple[str, list[Piece], str, str]:
    start, escape = draw(header())
    pieces = draw(st.lists(piece(escape), min_size=1, max_size=8))
    # Nothing follows an unterminated heredoc: BuildKit reads the rest of the file as its body.
    cut = next((i + 1 for i, p in enumerate(pieces) if p.unsure), len(pieces))
    return start, pieces[:cut], draw(OURS), draw(st.sampled_from(["\n", "\r\n"]))


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(dockerfile())
@example(("\ufeffFROM base\n", [Piece("RUN <<E-O-F\nFROM \x01\nE-O-F\nFROM \x00\n")], REPO, "\n"))
def test_pin_changes_exactly_what_buildkit_sees_or_refuses(tmp_path_factory, case) -> None:
    start, pieces, ref, eol = case
    before = (start + "".join(p.render(ref, None) for p in pieces)).replace("\n", eol)
    expected = (start + "".join(p.render(ref, PINNED) for p in pieces)).replace("\n", eol)
    after, error = pin(tmp_path_factory.mktemp("pin"), before)
    if any(p.unsure for p in pieces):
        assert (after, error is not None) == (before, True)
    elif "\x00" in "".join(p.text for p in pieces):
        assert (after, error) == (expected, None)
    else:  # no reference BuildKit sees: refused, nothing written
        assert (after, error is not None) == (before, True)


# ---- the engine's own BuildKit as the oracle: which lines are instructions, which heredoc bodies ---

# Each file's COPY instructions write the files listed; a line BuildKit took for an instruction
# instead of a body line (or the other way round) would write another set, or fail the build.
ENGINE_READS = {
    "a BOM hides no directive": (
        "\ufeff# escape=`\nFROM scratch\nCOPY a /1\\\nCOPY a /2\n",
        {"1\\": "a", "2": "a"},
    ),
    "a hyphenated delimiter": (
        "FROM scratch\nCOPY <<END-OF-SCRIPT /1\nCOPY a /3\nEND-OF-SCRIPT\nCOPY a /2\n",
        {"1": "COPY a /3\n", "2": "a"},
    ),
    "a quoted delimiter": (
        "FROM scratch\nCOPY <<'E-O-F' /1\nCOPY a /3\nE-O-F\nCOPY a /2\n",
        {"1": "COPY a /3\n", "2": "a"},
    ),
    "a quoted <<": ("FROM scratch\nCOPY '<<EOF' /1\nCOPY a /2\n", {"1": "q", "2": "a"}),
    "a << inside a word": ("FROM scratch\nCOPY x<<EOF /1\nCOPY a /2\n", {"1": "x", "2": "a"}),
    "<<- and tabs": (
        "FROM scratch\nCOPY <<-EOF /1\n\tCOPY a /3\n\t\tEOF\nCOPY a /2\n",
        {"1": "COPY a /3\n", "2": "a"},
    ),
    "two heredocs": (
        'FROM scratch\nCOPY <<A-1 <<"B.2" /d/\nx\nA-1\ny\nB.2\nCOPY a /2\n',
        {"d/A-1": "x\n", "d/B.2": "y\n", "2": "a"},
    ),
    "comment and blank lines in a continuation": (
        "FROM scratch\nCOPY a \\\n# note \\\n\n  /1\nCOPY a /2\n",
        {"1": "a", "2": "a"},
    ),
}


@pytest.mark.docker
@pytest.mark.parametrize(("text", "files"), ENGINE_READS.values(), ids=ENGINE_READS.keys())
def test_the_engine_reads_each_file_as_bake_does(
    engine: None, tmp_path: Path, text: str, files: dict
) -> None:
    context = tmp_path / "context"
    context.mkdir()
    for name, body in {"a": "a", "<<EOF": "q", "x<<EOF": "x"}.items():
        (context / name).write_text(body)
    (context / "Dockerfile").write_text(text)
    out = tmp_path / "out"
    build = subprocess.run(
        ["docker", "buildx", "build", "--progress=plain", "-o", f"type=local,dest={out}", str(context)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr[-2000:]
    written = {str(p.relative_to(out)): p.read_text() for p in out.rglob("*") if p.is_file()}
    assert written == files
    copies = [i for i in instructions(text) if i.keyword == "COPY"]
    assert len(copies) == len(set(name.split("/")[0] for name in files))


ENGINE_REFUSES = {
    "an unterminated heredoc": "FROM scratch\nCOPY <<EOF /1\nno end\n",
    "a second escape directive": "# escape=`\n# escape=\\\nFROM scratch\n",
    "escape=x": "# escape=x\nFROM scratch\n",
    "a JSON array of numbers": "FROM scratch\nCOPY [1, 2]\n",
}


@pytest.mark.docker
@pytest.mark.parametrize("text", ENGINE_REFUSES.values(), ids=ENGINE_REFUSES.keys())
def test_what_bake_refuses_the_engine_refuses(engine: None, tmp_path: Path, text: str) -> None:
    (tmp_path / "Dockerfile").write_text(text)
    build = subprocess.run(
        ["docker", "buildx", "build", "--progress=plain", "-o", "type=cacheonly", str(tmp_path)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert build.returncode != 0 and "Dockerfile" in build.stderr, build.stderr[-2000:]
    with pytest.raises(Unsure):
        list(instructions(text))
