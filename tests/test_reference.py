"""bake/reference.py: the distribution grammar of repository names and image references."""

from __future__ import annotations

import pytest

from bake.reference import NAME_MAX, host_of, image_problem, name_problem


@pytest.mark.parametrize(
    "name",
    [
        "ubuntu",
        "127.0.0.1:5000/bake-test/x",
        "registry.example/a__b/c-d/e.f",
        "localhost/x",
        "[::1]:5000/x",
        "a---b",
    ],
)
def test_a_valid_name_has_no_problem(name: str) -> None:
    assert name_problem(name) is None


@pytest.mark.parametrize(
    "name", ["Upper", "registry.example/A", "x/", "/x", "a..b", "a_-b", "-a", "registry.example//x", "a b"]
)
def test_a_name_outside_the_grammar_is_named_so(name: str) -> None:
    problem = name_problem(name)
    assert problem is not None and problem.startswith("not [HOST[:PORT]/]PATH")


def test_a_name_longer_than_the_limit_gives_its_length() -> None:
    name = "a" * (NAME_MAX + 1)
    assert name_problem("a" * NAME_MAX) is None
    assert name_problem(name) == f"{NAME_MAX + 1} characters, more than {NAME_MAX}"


@pytest.mark.parametrize(
    ("name", "host"),
    [
        ("127.0.0.1:5000/x", "127.0.0.1:5000"),
        ("registry.example/x/y", "registry.example"),
        ("localhost/x", "localhost"),
        ("build/assets", None),  # no '.', ':' or localhost: Docker Hub's
        ("ubuntu", None),
    ],
)
def test_host_of_reads_the_first_component_as_docker_does(name: str, host: str | None) -> None:
    assert host_of(name) == host


@pytest.mark.parametrize(
    "ref",
    [
        "registry.example:5000/x",
        "registry.example:5000/x:v1.2_3",
        f"registry.example:5000/x@sha256:{'a' * 64}",
        f"registry.example:5000/x:tag@sha256:{'0' * 64}",
    ],
)
def test_a_valid_image_reference_has_no_problem(ref: str) -> None:
    assert image_problem(ref) is None


@pytest.mark.parametrize(
    ("ref", "said"),
    [
        ("x@sha256:abc", "the digest 'sha256:abc'"),
        (f"x@sha256:{'A' * 64}", "lower-case hex"),
        ("x:-tag", "the tag '-tag'"),
        (f"x:{'t' * 129}", "up to 128"),
        ("X:tag", "not [HOST[:PORT]/]PATH"),
    ],
)
def test_an_image_reference_problem_names_the_part(ref: str, said: str) -> None:
    problem = image_problem(ref)
    assert problem is not None and said in problem
