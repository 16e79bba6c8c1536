"""Hostile repository names against ``bake/reference.py``: the grammar is checked before any engine call.

The reference grammar is distribution's ``reference/regexp.go``, written out again here as
the test's own oracle. (Round 4, issue 29: finding 4.)
"""

from __future__ import annotations

import os
import re
import socket
import threading
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from bake import cli
from bake.assets_image import check_repo
from bake.errors import UsageError
from tests.baked import write_manifest

pytestmark = pytest.mark.timeout(120)


# ---- finding 4: the reference grammar, before any engine call ---------------------------------

# distribution/reference/regexp.go, spelled out as the test's own oracle.
_ALNUM = r"[a-z0-9]+"
_SEPARATOR = r"(?:[_.]|__|[-]+)"
_COMPONENT = rf"{_ALNUM}(?:{_SEPARATOR}{_ALNUM})*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_HOST = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])"
_DOMAIN = rf"{_HOST}(?::[0-9]+)?"
NAME = re.compile(rf"(?:{_DOMAIN}/)?{_COMPONENT}(?:/{_COMPONENT})*")


def grammatical(repo: str) -> bool:
    return NAME.fullmatch(repo) is not None and len(repo) <= 255 and "\n" not in repo


BAD_REPOSITORIES = {
    "a scheme": "https://registry.example/x",
    "a leading -": "-x",
    "upper case in the path": "127.0.0.1:5000/Bake",
    "a space": "registry.example/a b",
    "a comma": "registry.example/a,b",
    "300 characters": "registry.example/" + "a" * 283,
    "//": "registry.example//x",
    "a/../b": "registry.example/a/../b",
    "a newline": "registry.example/x\ny",
    "HOST:PORT/../NAME": "127.0.0.1:5000/../x",
    "a leading separator": "registry.example/_x",
}


def hang_up_on(listener: socket.socket) -> Callable[[], int]:
    """Close every connection ``listener`` accepts unanswered (the client's call fails at once); return
    a function giving the count of connections since it was last asked."""
    accepted: list[int] = []

    def hang_up() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            accepted.append(1)
            conn.close()

    threading.Thread(target=hang_up, daemon=True).start()

    def calls() -> int:
        count = len(accepted)
        accepted.clear()
        return count

    return calls


@pytest.fixture
def engine_socket(tmp_path: Path):
    """A unix socket standing in for the engine: DOCKER_HOST for it, and a count of connections."""
    path = tmp_path / "engine.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(16)
    old = os.environ.get("DOCKER_HOST")
    os.environ["DOCKER_HOST"] = f"unix://{path}"
    yield hang_up_on(listener)
    listener.close()
    if old is None:
        os.environ.pop("DOCKER_HOST", None)
    else:
        os.environ["DOCKER_HOST"] = old


@pytest.fixture
def registry_socket():
    """A loopback TCP listener standing in for every registry: bake asks registries itself since round
    5, so HTTP_PROXY and HTTPS_PROXY name it (no name is ever resolved, no byte leaves the machine)
    and it hangs up on every connection it counts."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    proxy = f"http://127.0.0.1:{listener.getsockname()[1]}"
    saved = {k: os.environ.get(k) for k in ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "no_proxy")}
    os.environ.update(HTTP_PROXY=proxy, HTTPS_PROXY=proxy, NO_PROXY="", no_proxy="")
    urllib.request.install_opener(urllib.request.build_opener())  # urlopen's opener reads them now
    yield hang_up_on(listener)
    listener.close()
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    urllib.request.install_opener(None)  # the next urlopen builds one from the environment again


def run_publish_and_pin(tmp_path: Path, repo: str) -> list[int]:
    manifest = tmp_path / "assets.toml"
    if not manifest.exists():
        write_manifest(manifest)
        (tmp_path / "Dockerfile").write_text("FROM base\n")
    return [
        cli.main(["publish", "--manifest", str(manifest), f"--repository={repo}"]),
        cli.main(["pin", "--manifest", str(manifest), f"--repository={repo}", str(tmp_path / "Dockerfile")]),
    ]


@pytest.mark.parametrize("repo", BAD_REPOSITORIES.values(), ids=BAD_REPOSITORIES.keys())
def test_a_bad_repository_is_exit_2_before_the_engine(
    tmp_path: Path, engine_socket, registry_socket, repo: str
) -> None:
    assert run_publish_and_pin(tmp_path, repo) == [2, 2]
    assert engine_socket() == 0 and registry_socket() == 0


REPO_TEXT = st.one_of(
    st.text(alphabet="abAB09.:/_-@ ,\n[]", max_size=40),
    st.from_regex(NAME, fullmatch=True).filter(lambda s: len(s) < 80),
)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(REPO_TEXT)
@example("127.0.0.1:5000/../x")
@example("registry.example/x")
def test_any_repository_is_accepted_by_the_grammar_or_exit_2_with_no_engine_call(
    tmp_path_factory, engine_socket, registry_socket, repo: str
) -> None:
    tmp_path = tmp_path_factory.mktemp("repo")
    assert (check_ok(repo)) == grammatical(repo)
    codes = run_publish_and_pin(tmp_path, repo)
    if grammatical(repo):
        # Asked of the registry itself since round 5, which hangs up: exit 5; no engine is asked.
        reached = registry_socket()
        assert codes == [5, 5] and engine_socket() == 0
        if not repo.startswith("["):  # the grammar takes "[:]", which no URL holds: exit 5 unasked
            assert reached >= 2
    else:
        assert codes == [2, 2] and engine_socket() == 0 and registry_socket() == 0


def check_ok(repo: str) -> bool:
    try:
        check_repo(repo, option="--repository")
    except UsageError:
        return False
    return True
