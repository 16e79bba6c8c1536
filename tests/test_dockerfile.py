"""bake/dockerfile.py: a Dockerfile's instructions as BuildKit reads them, mapped back to file offsets.

Hostile files (BuildKit's corner cases, a generated-file property, the engine as the oracle) are
tests/reliability/test_dockerfile_hostile.py's.
"""

from __future__ import annotations

import pytest

from bake.dockerfile import Unsure, go_space, instructions, words

TEXT = (
    "# syntax=docker/dockerfile:1\n"
    "FROM base AS build\n"
    "COPY --link --from=registry.example/x:1 / /\n"
    "RUN echo a \\\n"
    "  && echo b\n"
    "onbuild run --mount=type=bind,from=y,target=/m true\n"
    'ARG A=1 B="2 3"\n'
)


def test_each_instruction_has_its_keyword_flags_arguments_and_first_line() -> None:
    found = [(i.keyword, [f.text for f in i.flags], i.args.text, i.line) for i in instructions(TEXT)]
    assert found == [
        ("FROM", [], "base AS build", 2),
        ("COPY", ["--link", "--from=registry.example/x:1"], "/ /", 3),
        ("RUN", [], "echo a   && echo b", 4),
        ("RUN", ["--mount=type=bind,from=y,target=/m"], "true", 6),  # what ONBUILD wraps
        ("ARG", [], 'A=1 B="2 3"', 7),
    ]


def test_every_offset_points_at_its_character_in_the_file() -> None:
    # Offsets skip what BuildKit removes (a continuation's escape and line break); each character stays put.
    spans = [span for i in instructions(TEXT) for span in (*i.flags, i.args)]
    assert ["".join(TEXT[o] for o in span.offsets) for span in spans] == [span.text for span in spans]


def test_a_literal_span_is_one_run_of_the_file() -> None:
    copy, run = [i for i in instructions(TEXT) if i.keyword in ("COPY", "RUN")][:2]
    assert copy.flags[1].literal() and copy.args.literal()
    assert not run.args.literal()  # the continuation's line break and escape are not in the text


def test_a_heredoc_body_is_no_instruction() -> None:
    text = "FROM base\nRUN <<EOF\nFROM other\nEOF\nCOPY a b\n"
    assert [(i.keyword, i.line) for i in instructions(text)] == [("FROM", 1), ("RUN", 2), ("COPY", 5)]


def test_the_escape_directive_changes_the_continuation_character() -> None:
    text = "# escape=`\nFROM base\nRUN echo `\n  b\nCOPY a b\n"
    run = next(i for i in instructions(text) if i.keyword == "RUN")
    assert (run.args.text, run.escape) == ("echo   b", "`")


@pytest.mark.parametrize(
    ("text", "line"),
    [("FROM a\nRUN <<EOF\nno end\n", 2), ("# escape=x\nFROM a\n", 1), ("FROM a\nRUN [1]\n", 2)],
    ids=["an unterminated heredoc", "an escape BuildKit refuses", "a JSON form of numbers"],
)
def test_what_buildkit_refuses_is_unsure_naming_the_line(text: str, line: int) -> None:
    with pytest.raises(Unsure) as caught:
        list(instructions(text))
    assert caught.value.line == line and str(caught.value).startswith(f"line {line}: ")


def test_words_keep_quotes_and_split_at_blanks_outside_them() -> None:
    arg = next(i for i in instructions(TEXT) if i.keyword == "ARG")
    assert [w.text for w in words(arg.args, arg.escape)] == ["A=1", 'B="2 3"']


@pytest.mark.parametrize(
    ("ch", "space"), [(" ", True), ("\t", True), ("\u00a0", True), ("\x1c", False), ("x", False)]
)
def test_go_space_is_gos_unicode_isspace(ch: str, space: bool) -> None:
    assert go_space(ch) is space
