"""Properties over hostile manifests, arguments, server and Hub answers, and adds at once, by hypothesis.

The invariant is stated once (``check_invariant``): the real ``bake`` exits 0, 2 or 3,
never prints a traceback, and creates nothing outside the places it was told to write
(--dest, the cache, the --json report, the manifest). hypothesis then searches for inputs
that break it.
The profile (tests/reliability/conftest.py) bounds the examples; CI runs a fixed seed.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from bake.manifest import parse_manifest
from tests.hub_server import LoopbackHub
from tests.mirror import Mirror

from . import bake_command, blob, cli_env, manifest_text, sha256

PAYLOAD = blob(3000, "properties")
PAYLOAD_SHA = hashlib.sha256(PAYLOAD).hexdigest()
CONTRACT_EXITS = {0, 2, 3}
# Bounds that keep one example to seconds even when the input is a server that never finishes.
FAST = ("--timeout", "1", "--deadline", "4", "--attempts", "2")


@dataclass
class Sandbox:
    """A working directory for one example; ``allowed`` holds the paths bake was told to write."""

    root: Path
    allowed: list[Path] = field(default_factory=list)

    @property
    def work(self) -> Path:
        return self.root / "work"

    def allow(self, *paths: str | Path) -> None:
        self.allowed += [(self.work / p).resolve() for p in paths]


@pytest.fixture(scope="module")
def sandboxes() -> Iterator[Callable[[], Sandbox]]:
    """Make a fresh Sandbox per example (function-scoped tmp_path would be shared by every example)."""
    with tempfile.TemporaryDirectory(prefix="bake-properties-") as top:
        counter = iter(range(10**9))

        def make() -> Sandbox:
            root = Path(top) / str(next(counter))
            (root / "work").mkdir(parents=True)
            (root / "work/payload.bin").write_bytes(PAYLOAD)
            return Sandbox(root)

        yield make


def created_files(root: Path, before: set[Path]) -> list[Path]:
    return [p for p in root.rglob("*") if p not in before and (p.is_symlink() or not p.is_dir())]


def run_fetch(box: Sandbox, *args: str, env: dict[str, str] | None = None):
    """Run ``bake fetch ARGS`` in the sandbox with its cache and HOME inside it; check the invariant."""
    return run_bake(box, "fetch", *args, env=env)


def run_bake(box: Sandbox, *argv: str, env: dict[str, str] | None = None):
    """Run ``bake ARGV`` in the sandbox with its cache, HOME and TMPDIR inside it; check the invariant."""
    before = set(box.root.rglob("*"))
    box.allow("xdg-cache")
    (box.root / "tmp").mkdir(exist_ok=True)
    sandboxed = {
        "XDG_CACHE_HOME": str(box.work / "xdg-cache"),
        "HOME": str(box.work),
        "TMPDIR": str(box.root / "tmp"),
    }
    result = subprocess.run(
        bake_command(*argv), env=cli_env({**sandboxed, **(env or {})}),
        cwd=box.work, capture_output=True, text=True, timeout=90, check=False,
    )  # fmt: skip
    check_invariant(box, result, before)
    return result


def check_invariant(box: Sandbox, result, before: set[Path]) -> None:
    assert result.returncode in CONTRACT_EXITS, f"exit {result.returncode}:\n{result.stderr[-3000:]}"
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    if result.returncode:
        assert "bake: error:" in result.stderr, f"exit {result.returncode} without a message"
    stray = [
        p
        for p in created_files(box.root, before)
        if not any(p.resolve() == a or a in p.resolve().parents for a in box.allowed)
    ]
    assert not stray, f"created outside --dest, the cache and the report: {stray}"


# ---- manifests ----------------------------------------------------------------------------------

HOSTILE_TEXT = st.one_of(
    st.text(max_size=40),
    st.sampled_from(["", ".", "..", "/", "a/../b", "./a", "a/", "SHA256SUMS", "a\nb", "a\tb", "x" * 300]),
    st.text(alphabet=st.characters(codec="utf-8"), max_size=20).map(lambda s: "d/" + s),
)
VALUES = st.one_of(
    HOSTILE_TEXT,
    st.integers(min_value=-(2**70), max_value=2**70),
    st.booleans(),
    st.lists(HOSTILE_TEXT, max_size=3),
    st.lists(st.lists(st.integers(), max_size=2), max_size=2),
    st.dictionaries(st.sampled_from(["a", "b"]), st.integers(), max_size=2),
)


def good_asset(box: Sandbox) -> dict[str, object]:
    return {
        "name": "good",
        "path": "a/payload.bin",
        "sha256": PAYLOAD_SHA,
        "size": len(PAYLOAD),
        "urls": [(box.work / "payload.bin").as_uri()],
    }


ASSET_KEYS = ["name", "path", "sha256", "size", "urls", "groups", "extra"]


def _toml_value(value: object) -> str:
    """A TOML rendering of VALUE (tables inline), or text TOML rejects: both are inputs."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False)


@given(
    overrides=st.dictionaries(st.sampled_from(ASSET_KEYS), VALUES, max_size=4),
    drop=st.sets(st.sampled_from(ASSET_KEYS[:5]), max_size=2),
    tail=st.one_of(
        st.just(""), st.text(max_size=80), st.sampled_from(["[[asset]]", "asset = 1", "[x]\ny=1"])
    ),
)
# Instances issue 10 reported, always tried before the search.
@example(overrides={"path": "."}, drop=set(), tail="")
@example(overrides={"path": "d/a\n" + "0" * 64 + "  evil"}, drop=set(), tail="")
@example(overrides={"path": "d/" + "x" * 300}, drop=set(), tail="")
@example(overrides={}, drop=set(), tail="a = " + "[" * 5000 + "]" * 5000)
def test_any_manifest_ends_in_a_contract_exit(sandboxes, overrides: dict, drop: set, tail: str) -> None:
    box = sandboxes()
    asset = {k: v for k, v in {**good_asset(box), **overrides}.items() if k not in drop}
    text = "[[asset]]\n" + "".join(f"{k} = {_toml_value(v)}\n" for k, v in asset.items()) + tail
    (box.work / "assets.toml").write_text(text, encoding="utf-8", errors="surrogatepass")
    box.allow("dest")
    result = run_fetch(box, "--manifest", "assets.toml", "--dest", "dest", *FAST)
    if result.returncode == 0:  # whatever was accepted landed verified
        assert (box.work / "dest" / "SHA256SUMS").is_file()


# ---- server answers -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    """One scripted HTTP answer: status, headers as raw pairs, body bytes."""

    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes


class ScriptedServer:
    """Loopback HTTP server: each request takes the next scripted Answer, then the payload, plainly."""

    def __init__(self) -> None:
        self.script: list[Answer] = []
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/payload.bin"

    def next_answer(self) -> Answer:
        with self.lock:
            if self.script:
                return self.script.pop(0)
        return Answer(200, (("Content-Length", str(len(PAYLOAD))),), PAYLOAD)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                answer = server.next_answer()
                head = f"HTTP/1.1 {answer.status} Scripted\r\n"
                head += "".join(f"{k}: {v}\r\n" for k, v in answer.headers) + "Connection: close\r\n\r\n"
                try:
                    self.wfile.write(head.encode("latin-1", "replace") + answer.body)
                except OSError:
                    pass
                self.close_connection = True

        return Handler

    def __enter__(self) -> ScriptedServer:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer() as s:
        yield s


HUGE = str(2**63)
HEADER_VALUES = {
    "Content-Length": st.sampled_from(
        ["0", "1", "2999", "3000", "3001", HUGE, str(2**64 + 5), "-1", "x", ""]
    ),
    "Content-Range": st.sampled_from(
        ["bytes 0-2999/3000", "bytes 1-2999/3000", "bytes 0-0/1", f"bytes 0-{HUGE}/*", "bytes */3000", "junk"]
    ),
    "Accept-Ranges": st.sampled_from(["bytes", "none", "junk"]),
    "ETag": st.sampled_from(['"a"', '"b"', 'W/"a"', ""]),
    "Last-Modified": st.sampled_from(["Wed, 21 Oct 2015 07:28:00 GMT", "yesterday", ""]),
    "Content-Encoding": st.sampled_from(["gzip", "identity", "br", "x"]),
    "Retry-After": st.sampled_from(["0", "1", "3600", HUGE, "-5", "Wed, 21 Oct 2099 07:28:00 GMT", "soon"]),
    "Location": st.sampled_from(["/payload.bin", "/elsewhere", "http://127.0.0.1:1/x", "", "ftp://x/"]),
    "Transfer-Encoding": st.sampled_from(["chunked", "gzip"]),
}
STATUSES = st.one_of(
    st.sampled_from([200, 204, 206, 301, 302, 303, 307, 308, 400, 401, 403, 404, 408, 416, 429, 500, 503]),
    st.integers(min_value=100, max_value=999),
)
BODIES = st.one_of(
    st.just(PAYLOAD),
    st.integers(0, len(PAYLOAD)).map(lambda n: PAYLOAD[:n]),
    st.binary(max_size=200),
    st.just(PAYLOAD + b"trailing"),
)
ANSWERS = st.builds(
    Answer,
    status=STATUSES,
    headers=st.lists(
        st.sampled_from(sorted(HEADER_VALUES)).flatmap(lambda k: st.tuples(st.just(k), HEADER_VALUES[k])),
        max_size=4,
    ).map(tuple),
    body=BODIES,
)


@settings(max_examples=max(5, settings().max_examples * 3 // 4))
@given(
    script=st.lists(ANSWERS, min_size=1, max_size=3), sized=st.booleans(), connections=st.sampled_from("12")
)
@example(script=[Answer(200, (("Content-Length", HUGE),), PAYLOAD)], sized=False, connections="1")
def test_any_server_answers_end_in_a_contract_exit(
    sandboxes, server: ScriptedServer, script: list[Answer], sized: bool, connections: str
) -> None:
    box = sandboxes()
    entry = {"name": "served", "path": "s/payload.bin", "sha256": PAYLOAD_SHA, "urls": [server.url]}
    if sized:
        entry["size"] = len(PAYLOAD)
    (box.work / "assets.toml").write_text(manifest_text([entry]))
    server.script = list(script)
    box.allow("dest", "report.json")
    result = run_fetch(
        box, "--manifest", "assets.toml", "--dest", "dest", "--json", "report.json",
        "--connections", connections, *FAST,
    )  # fmt: skip
    installed = box.work / "dest/s/payload.bin"
    if result.returncode == 0:
        assert installed.read_bytes() == PAYLOAD
    else:
        assert not installed.exists(), "a failed fetch left a file at the asset path"


# ---- arguments ----------------------------------------------------------------------------------

# Mostly numbers a user would pass, so most examples get past parsing to the fetch itself.
SENSIBLE_NUMBER = st.sampled_from(["1", "2", "3", "0.5", "8"])
NUMBER_TEXT = st.one_of(
    SENSIBLE_NUMBER,
    SENSIBLE_NUMBER,
    SENSIBLE_NUMBER,
    st.sampled_from(["inf", "-inf", "nan", "NaN", "0", "-0", "-1", "1e400", "1e-400", "", " 1", "0x10"]),
    st.integers(min_value=-(2**80), max_value=2**80).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
)
# Short relative paths over a small alphabet, so they often name what the sandbox holds:
# "a" is a directory, "b" a file, "." the working directory.
PATH_TEXT = st.text(alphabet="ab./-", min_size=1, max_size=6)
# Options whose values decide the transfer itself; each example picks some of them.
OPTIONS = {
    "--timeout": NUMBER_TEXT,
    "--deadline": NUMBER_TEXT,
    "--connections": NUMBER_TEXT,
    "--attempts": NUMBER_TEXT,
    "--jobs": NUMBER_TEXT,
    "--dest": PATH_TEXT,
    "--cache-dir": PATH_TEXT,
    "--json": PATH_TEXT,
}
# Any text an argv can carry: no NUL, and no lone surrogate, which no OS argument can hold
# (subprocess cannot encode one, so such an example would fail before bake runs).
ARG_TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x00"), max_size=30)
# Options that mostly end the run at parsing; an example takes at most one.
RARE_OPTIONS = st.one_of(
    st.tuples(st.just("--mirror"), st.one_of(ARG_TEXT, st.just("http://127.0.0.1:1/=file:///x/"))),
    st.tuples(st.just("--group"), ARG_TEXT),
    st.tuples(st.just("--ca-bundle"), PATH_TEXT),
    st.tuples(st.just("--manifest"), st.sampled_from(["missing.toml", "", ".", "payload.bin"])),
)
FLAGS = ["--no-origin", "--allow-http", "-q", "--verbose", "--", "-x", "extra"]


@given(
    options=st.fixed_dictionaries({}, optional=OPTIONS),
    rare=st.lists(RARE_OPTIONS, max_size=1),
    flags=st.lists(st.sampled_from(FLAGS), max_size=2),
)
@example(options={"--timeout": "inf"}, rare=[], flags=[])
@example(options={"--json": "."}, rare=[], flags=[])
@example(options={"--json": "b/report"}, rare=[], flags=[])
def test_any_arguments_end_in_a_contract_exit(
    sandboxes, server: ScriptedServer, options: dict[str, str], rare: list, flags: list
) -> None:
    box = sandboxes()
    (box.work / "a").mkdir()
    (box.work / "b").write_text("a file where a directory may be asked for")
    # Served over HTTP, so the timeouts, connections and attempts given reach a real transfer.
    (box.work / "assets.toml").write_text(manifest_text([{**good_asset(box), "urls": [server.url]}]))
    server.script = []
    options.setdefault("--dest", "dest")
    box.allow(*(options[o] for o in ("--dest", "--cache-dir", "--json") if o in options))
    argv = [part for option, value in [*options.items(), *rare] for part in (option, value)]
    run_fetch(box, *FAST, "--manifest", "assets.toml", *argv, *flags)


# ---- a hostile Hub --------------------------------------------------------------------------------

HUB_FILES = {"config.json": b'{"a": 1}\n', "tok/vocab.txt": b"a\nb\n", "same.json": b'{"a": 1}\n'}
HUB_WEIGHTS = blob(40_000, "properties-hub")
HUB_TEXT = st.one_of(
    st.sampled_from(
        ["../x", "../../../../escape", "/abs", "a\nb", "a\\b", "", ".", "x" * 300, "a/./b", "%2e%2e/x", "~"]
    ),
    st.text(max_size=16),
)
HUB_VALUE = st.one_of(
    HUB_TEXT,
    st.integers(min_value=-(2**64), max_value=2**64),
    st.none(),
    st.booleans(),
    st.lists(st.integers(), max_size=2),
    st.sampled_from(["a" * 40, "b" * 64, "A" * 40]),
)
HOSTILE_ANSWERS = st.fixed_dictionaries(
    {},
    optional={
        "commit": HUB_VALUE,
        "etag": HUB_VALUE,
        "linked_size": HUB_VALUE,
        "size": HUB_VALUE,
        "blob": HUB_VALUE,
        "lfs_sha256": HUB_VALUE,
        "paths": st.dictionaries(st.sampled_from([*HUB_FILES, "w.bin"]), HUB_TEXT, max_size=2),
        "listing": st.sampled_from(["loop", "endless"]),
        "extra_entries": st.lists(
            st.dictionaries(st.sampled_from(["type", "path", "size", "oid", "lfs"]), HUB_VALUE, max_size=5),
            max_size=2,
        ),
    },
)


@pytest.fixture(scope="module")
def hub() -> Iterator[tuple[LoopbackHub, str]]:
    """A loopback Hub serving one repository, and an honest manifest pinning it (downloader bake)."""
    with tempfile.TemporaryDirectory(prefix="bake-properties-hub-") as top:
        server = LoopbackHub(Path(top))
        server.commit("org/prop", {**HUB_FILES, "w.bin": (HUB_WEIGHTS, True)})
        with server:
            manifest = Path(top) / "pinned.toml"
            env = cli_env({"HF_ENDPOINT": server.endpoint, "XDG_CACHE_HOME": str(Path(top) / "xdg")})
            added = subprocess.run(
                bake_command("add", "hf://org/prop", "--manifest", manifest), env=env, capture_output=True,
                text=True, timeout=60, check=False,
            )  # fmt: skip
            assert added.returncode == 0, added.stderr
            yield server, manifest.read_text()


@settings(max_examples=max(5, settings().max_examples // 2))
@given(answers=HOSTILE_ANSWERS, downloader=st.sampled_from(["bake", "huggingface_hub"]))
@example(answers={"etag": "../../../../escape"}, downloader="huggingface_hub")
@example(answers={"commit": "../../../escape"}, downloader="bake")
@example(answers={"paths": {"w.bin": "../w.bin"}}, downloader="huggingface_hub")
def test_hostile_hub_answers_end_in_a_contract_exit(sandboxes, hub, answers: dict, downloader: str) -> None:
    """Whatever the Hub answers, `bake add hf://` and `bake fetch` (either downloader) write nothing outside.

    Exit 0, 2 or 3 and no traceback (check_invariant); what add accepted is a valid manifest;
    what fetch installed verifies.
    """
    server, pinned = hub
    server.hostile("org/prop", page_size=2, **answers)
    box = sandboxes()
    env = {"HF_ENDPOINT": server.endpoint, "HF_HUB_DISABLE_XET": "1", "HF_HOME": str(box.root / "hf-home")}
    box.allow("added.toml")
    added = run_bake(box, "add", "hf://org/prop", "--manifest", "added.toml", *FAST, env=env)
    if added.returncode == 0:  # what was accepted is a valid manifest
        parse_manifest((box.work / "added.toml").read_text(), allow_http=True)
    if downloader != "bake":
        pinned = pinned.replace('commit = "', f'downloader = "{downloader}"\ncommit = "')
    (box.work / "pinned.toml").write_text(pinned)
    box.allow("dest")
    fetched = run_bake(box, "fetch", "--manifest", "pinned.toml", "--dest", "dest", *FAST, env=env)
    if fetched.returncode == 0:  # whatever landed is what the manifest pins
        assert run_bake(box, "verify", "--manifest", "pinned.toml", "--dest", "dest").returncode == 0


# ---- two adds at once -----------------------------------------------------------------------------

ADD_FILES = {n: blob(300_000 + i, f"properties-add-{n}") for i, n in enumerate("abc")}
ADD_PATHS = ["data/x.bin", "data/y.bin", "other/x.bin", "data/z.bin"]
ONE_ADD = st.tuples(st.sampled_from(sorted(ADD_FILES)), st.sampled_from(ADD_PATHS))


@pytest.fixture(scope="module")
def slow_mirror() -> Iterator[Mirror]:
    """Files served slowly enough that two adds started together overlap."""
    with Mirror({f"/{n}.bin": d for n, d in ADD_FILES.items()}, rate=1024 * 1024) as m:
        yield m


@settings(max_examples=max(5, settings().max_examples // 2))
@given(pair=st.tuples(ONE_ADD, ONE_ADD), via_link=st.booleans())
@example(pair=(("a", "data/x.bin"), ("b", "data/y.bin")), via_link=False)
@example(pair=(("a", "data/x.bin"), ("b", "other/x.bin")), via_link=True)
def test_two_adds_at_once_keep_every_entry_that_was_added(
    sandboxes, slow_mirror: Mirror, pair: tuple, via_link: bool
) -> None:
    """Both exit 0 and both entries are there, or one is refused (exit 2: a name or path taken).

    No entry that an add reported is ever lost, the manifest stays valid, and a link stays a link.
    """
    box = sandboxes()
    real = box.work / "real.toml"
    real.write_text(manifest_text([good_asset(box)]))
    target = box.work / "link.toml" if via_link else real
    if via_link:
        target.symlink_to(real)
    box.allow("real.toml", "link.toml")
    before = set(box.root.rglob("*"))
    procs = [
        subprocess.Popen(
            bake_command(
                "add",
                slow_mirror.url(f"/{name}.bin"),
                "--path",
                path,
                "--manifest",
                target,
                "--cache-dir",
                box.work / "xdg-cache" / str(i),
            ),
            env=cli_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i, (name, path) in enumerate(pair)
    ]
    results = [subprocess.CompletedProcess(p.args, p.wait(timeout=90), *p.communicate()) for p in procs]
    box.allow("xdg-cache")
    for result in results:
        check_invariant(box, result, before)
    entries = {a.path: a.sha256 for a in parse_manifest(real.read_text(), allow_http=True)}
    added = {
        path: sha256(ADD_FILES[name])
        for (name, path), r in zip(pair, results, strict=True)
        if r.returncode == 0
    }
    assert entries == {"a/payload.bin": PAYLOAD_SHA, **added}, [r.stderr for r in results]
    assert added, "at least one add lands"
    for result in results:
        assert result.returncode in (0, 2), result.stderr
        if result.returncode == 2:
            assert "already used" in result.stderr
    assert target.is_symlink() == via_link
