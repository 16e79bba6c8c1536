"""Round 4 (issue 29): ``bake pin`` reads a Dockerfile as BuildKit does; references are checked first.

The Dockerfile rules are BuildKit's parser (moby/buildkit v0.13, the frontend built into the
engine 26.1 the toolchain runs): ``frontend/dockerfile/parser/parser.go`` (the BOM on line 1,
continuation lines, comment lines inside them, heredocs after the instruction),
``directives.go`` (parser directives), ``split_command.go`` (flags), and ``shell/lex.go`` (the
words a heredoc is looked for in). The generated files below know by construction which
references BuildKit sees: the property needs no second parser.

The reference grammar is distribution's ``reference/regexp.go``, written out again here as
the test's own oracle.
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
import stat
import subprocess
import sys
import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from bake import cli
from bake.assets_image import check_repo
from bake.dockerfile import Unsure, instructions
from bake.errors import UsageError
from bake.pin import pin_files
from bake.publish import selection_of
from tests.baked import write_manifest
from tests.loopback import LoopbackServer
from tests.registries import REGISTRY, push_manifest
from tests.runners import bake

REPO = "registry.example:5000/vllm-ci/bake-assets"
OLD = "sha256:" + "0" * 64
PINNED = f"{REPO}:c45ecfeac55e@sha256:{'d' * 64}"

pytestmark = pytest.mark.timeout(120)


def pin(tmp_path: Path, text: str, name: str = "Dockerfile") -> tuple[str, UsageError | None]:
    """Pin ``text`` written to a file; return the file's text afterwards and the UsageError, if any."""
    path = tmp_path / name
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    try:
        pin_files([path], REPO, PINNED, check=False)
        error = None
    except UsageError as exc:
        error = exc
    return path.read_bytes().decode("utf-8", "surrogateescape"), error


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


# ---- finding 10 (pin): a FIFO is refused, never read ------------------------------------------


PIN_ONE = (
    "import sys; from bake.pin import pin_files; pin_files(sys.argv[1:], 'r.example/x', 'r', check=False)"
)


@pytest.mark.timeout(20)
def test_a_fifo_dockerfile_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "Dockerfile"
    os.mkfifo(fifo)
    code = subprocess.run(
        ["timeout", "10", sys.executable, "-c", PIN_ONE, str(fifo)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert code.returncode == 1 and "not a regular file" in code.stderr, code.stderr


# ---- finding 12: several files at once, each edited in place ---------------------------------


def test_a_failure_on_the_second_file_leaves_the_first_unchanged(tmp_path: Path, tmpfs) -> None:
    first = tmp_path / "Dockerfile.a"
    first.write_text(f"FROM {REPO}:old\n")
    ro = tmpfs("ro", 1 << 20)
    second = ro / "Dockerfile.b"
    second.write_text(f"FROM {REPO}:old\n")
    subprocess.run(["mount", "-o", "remount,ro", str(ro)], check=True)
    with pytest.raises(UsageError) as caught:
        pin_files([first, second], REPO, PINNED, check=False)
    assert first.read_text() == second.read_text() == f"FROM {REPO}:old\n"
    assert f"{second}: cannot write it" in str(caught.value) and "no file was changed" in str(caught.value)


def test_pinning_keeps_the_inode_the_owner_and_the_mode(tmp_path: Path) -> None:
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(f"FROM {REPO}:old\n")
    os.link(dockerfile, tmp_path / "linked")
    os.chown(dockerfile, 1234, 4321)
    dockerfile.chmod(0o640)
    before = dockerfile.stat()
    pin_files([dockerfile], REPO, PINNED, check=False)
    after = dockerfile.stat()
    assert (after.st_ino, after.st_uid, after.st_gid, stat.S_IMODE(after.st_mode)) == (
        before.st_ino, 1234, 4321, 0o640
    )  # fmt: skip
    assert (tmp_path / "linked").read_text() == f"FROM {PINNED}\n"


# ---- finding 6: the serve format's limits in the manifest check -------------------------------


def test_a_location_longer_than_bake_serve_allows_is_a_manifest_error(tmp_path: Path, capsys) -> None:
    long_default = "/" + "/".join(["d" * 200] * 6)  # every component plain, the field over 1024 bytes
    manifest = write_manifest(tmp_path / "assets.toml")
    manifest.write_text(
        manifest.read_text()
        + f'[[consumer]]\nname = "long"\nlocations = ["${{LONG_CACHE:-{long_default}}}/x"]\n'
    )
    assert cli.main(["manifest", "check", "--manifest", str(manifest)]) == 2
    assert "consumer 'long'" in capsys.readouterr().err


# ---- finding 5: the digest is the hash of the bytes the registry serves -----------------------


class LyingRegistry:
    """A loopback front for the toolchain's registry that names every manifest by a digest it is not.

    Each manifest answer carries ``Docker-Content-Digest: LIE``, and a request for LIE gets the
    real manifest, so the lie holds up to any client that does not hash what it was served.
    """

    LIE = "sha256:" + hashlib.sha256(b"not the manifest").hexdigest()

    def __init__(self) -> None:
        self.truth = ""
        self.server = LoopbackServer(self._handler())
        self.host = f"127.0.0.1:{self.server.port}"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        front = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_HEAD(self) -> None:
                self._forward(send_body=False)

            def do_GET(self) -> None:
                self._forward(send_body=True)

            def _forward(self, send_body: bool) -> None:
                path = self.path.replace(front.LIE, front.truth) if front.truth else self.path
                headers = {"Accept": ", ".join(self.headers.get_all("Accept") or ["*/*"])}
                request = urllib.request.Request(
                    f"http://{REGISTRY}{path}", method=self.command, headers=headers
                )
                try:
                    answer = urllib.request.urlopen(request, timeout=30)
                except urllib.error.HTTPError as exc:
                    answer = exc
                body = answer.read()
                self.send_response(answer.status if hasattr(answer, "status") else answer.code)
                for key, value in answer.headers.items():
                    if key.lower() == "docker-content-digest" and "/manifests/" in path:
                        front.truth = value
                        value = front.LIE
                    if key.lower() not in ("connection", "transfer-encoding", "date", "server"):
                        self.send_header(key, value)
                self.end_headers()
                if send_body:
                    self.wfile.write(body)

        return Handler


@pytest.fixture
def lying_registry(engine: None):
    front = LyingRegistry()
    with front.server:
        yield front


@pytest.mark.docker
def test_a_registry_that_lies_about_the_digest_is_exit_5(
    lying_registry: LyingRegistry, tmp_path: Path
) -> None:
    manifest = write_manifest(tmp_path / "assets.toml")
    name = f"bake-test/lie-{uuid.uuid4().hex[:12]}"
    # Every image of the selection is there (each unit's, the index's, the whole's): only the lie is wrong.
    chosen = selection_of(manifest, f"{REGISTRY}/{name}", [])
    for ref in [*map(chosen.unit_ref, chosen.units), chosen.index_ref, chosen.whole_ref]:
        push_manifest(ref)
    repo = f"{lying_registry.host}/{name}"
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(f"COPY --from={repo} / /\n")

    pinned = bake("pin", "--manifest", str(manifest), "--repository", repo, str(dockerfile))
    published = bake("publish", "--manifest", str(manifest), "--repository", repo)

    for proc in (pinned, published):
        assert proc.returncode == 5, proc.stderr
        assert LyingRegistry.LIE in proc.stderr and "hash" in proc.stderr, proc.stderr
    assert dockerfile.read_text() == f"COPY --from={repo} / /\n"
    assert LyingRegistry.LIE not in published.stdout


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
