"""Round 5 (issue 38): a registry that lies, a harvest that never pulls, inputs that failed at build time.

Each finding of the round's hostile review is a test here that failed on the code it reviewed:

- R5-3: a tag that is present is not trusted. A loopback registry that answers every tag with
  one image, and the toolchain's real registry with a unit's tag pre-seeded (or replaced after a
  publish) with other bytes, are refused with exit 5, naming the tag, what was expected and what
  was served; the Dockerfile stays as it was. Asking takes two requests a tag, counted by a
  loopback proxy in front of the registry.
- R5-4: ``harvest --diff ROOT`` never pulls a reference that names no registry host. The engine
  is a loopback stand-in on a unix socket that records every call and claims every pull works.
- R5-6: more units than an image can run on are refused by ``manifest check``, ``publish`` and
  ``pin`` (exit 2), and more than bake's budget are warned about, before anything is built.
- R5-7: hex, commits and names are matched whole: a trailing newline is refused. ``sha256:HEX``
  is accepted wherever a sha256 is, and written as bare hex.
- R5-8: ``harvest`` starts a manifest that holds only comments, or nothing, as ``bake add`` does.
- Observation: the large file harvest hashes says so on stderr as it reads.
"""

from __future__ import annotations

import ast
import hashlib
import io
import json
import logging
import re
import socketserver
import tarfile
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from bake.assets_image import registry_digest
from bake.errors import BuildError
from bake.hub import scan
from bake.publish import selection_of
from tests.baked import FILES, VOCAB_PATH, write_manifest
from tests.mirror import Mirror
from tests.registries import (
    REGISTRY,
    CountingProxy,
    OneImageRegistry,
    publish_files,
    push_manifest,
    push_one_layer,
)

from . import asset_entry, bake, blob, manifest_text, sha256

pytestmark = pytest.mark.timeout(180)

BAKE_PACKAGE = Path(__file__).resolve().parents[2] / "bake"
# No engine answers here: a command that reached for one fails loudly instead of quietly succeeding.
NO_ENGINE = {"DOCKER_HOST": "unix:///nonexistent/docker.sock"}


def repository(kind: str) -> str:
    return f"{REGISTRY}/bake-test/rel-{kind}-{uuid.uuid4().hex[:10]}"


def registry_has(ref: str) -> bool:
    return registry_digest(ref) is not None


# ---- R5-3: a registry that lies ------------------------------------------------------------------


@pytest.mark.parametrize("layers", [0, 1], ids=["an empty image", "a one-layer image"])
def test_pin_refuses_a_registry_that_answers_every_tag_with_one_image(tmp_path: Path, layers: int) -> None:
    manifest = write_manifest(tmp_path / "assets.toml")  # three units
    dockerfile = tmp_path / "Dockerfile"
    with OneImageRegistry(layers) as liar:
        repo = f"{liar.host}/bake-assets"
        text = f"FROM base\nCOPY --link --from={repo} / /\n"
        dockerfile.write_text(text)
        pin = bake(
            "pin", "--manifest", manifest, "--repository", repo, dockerfile, cwd=tmp_path, env=NO_ENGINE
        )
        check = bake("pin", "--check", "--manifest", manifest, "--repository", repo, dockerfile, cwd=tmp_path)
    chosen = selection_of(manifest, repo, [])
    for proc in (pin, check):
        assert proc.returncode == 5, proc.stderr
        assert "Traceback" not in proc.stderr and proc.stdout == ""
        assert all(chosen.unit_ref(unit) in proc.stderr for unit in chosen.units)
        assert f"expected 5 distinct images; served one, {liar.digest}" in proc.stderr
        assert (
            f"{chosen.whole_ref}: expected 4 layers (one per unit, then the index's); served" in proc.stderr
        )
    assert dockerfile.read_text() == text, "the Dockerfile stays untouched"


@pytest.mark.parametrize("seeded", ["an empty image", "other bytes"])
def test_publish_refuses_a_unit_someone_pushed_first(engine: None, tmp_path: Path, seeded: str) -> None:
    manifest = write_manifest(tmp_path / "assets.toml")
    repo = repository("seeded")
    chosen = selection_of(manifest, repo, ["vllm"])
    unit = chosen.unit_ref(chosen.units[0])
    if seeded == "an empty image":
        served = push_manifest(unit)
    else:
        served = push_one_layer(unit, VOCAB_PATH, b"not the vocab the manifest pins\n")
    with pytest.raises(BuildError) as caught:
        publish_files(manifest, repo, ["vllm"], FILES)
    message = str(caught.value)
    assert caught.value.exit_code == 5
    assert f"{unit}: expected 1 layer, diff ID sha256:" in message and "(the tree bake built)" in message
    assert f"served {served}" in message and "nothing was pushed or pinned" in message
    assert registry_has(chosen.index_ref) is False and registry_has(chosen.whole_ref) is False


def test_pin_refuses_a_unit_replaced_after_it_was_published(engine: None, tmp_path: Path) -> None:
    manifest = write_manifest(tmp_path / "assets.toml")
    repo = repository("replaced")
    block = publish_files(manifest, repo, [], FILES)
    selection = ["--manifest", manifest, "--repository", repo]
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(f"FROM base\nCOPY --link --from={repo} / /\n")
    assert bake("pin", *selection, dockerfile, cwd=tmp_path).returncode == 0
    pinned = dockerfile.read_text()
    assert bake("pin", "--check", *selection, dockerfile, cwd=tmp_path).returncode == 0

    unit, published = block.units[1]
    replaced = push_one_layer(published.ref, unit.paths[0], b"other bytes under a unit's tag\n")
    for args in (["--check"], []):
        proc = bake("pin", *args, *selection, dockerfile, cwd=tmp_path)
        assert proc.returncode == 5, proc.stderr
        assert f"{published.ref}: expected 1 layer, diff ID sha256:" in proc.stderr
        assert f"(layer 2 of {block.whole.ref})" in proc.stderr and f"served {replaced}" in proc.stderr
    assert dockerfile.read_text() == pinned, "the Dockerfile stays untouched"


def test_asking_takes_two_requests_a_tag_and_a_push_five_an_image(engine: None, tmp_path: Path) -> None:
    manifest = write_manifest(tmp_path / "assets.toml")  # three units, the index and the whole
    dockerfile = tmp_path / "Dockerfile"
    with CountingProxy(REGISTRY) as proxy:
        repo = f"{proxy.host}/bake-test/rel-count-{uuid.uuid4().hex[:10]}"
        dockerfile.write_text(f"COPY --from={repo} / /\n")
        publish_files(manifest, repo, [], FILES)
        pushed = list(proxy.requests)
        proxy.requests.clear()
        proc = bake("pin", "--check", "--manifest", manifest, "--repository", repo, dockerfile, cwd=tmp_path)
        asked = list(proxy.requests)
    assert proc.returncode == 1 and "stale line" in proc.stderr, proc.stderr
    tags = 3 + 2
    # The first publish: a question a tag; then for each one-layer image its layer and its config
    # (each a mount that opens an upload, then its PUT) and its manifest; then the whole's config
    # and manifest, its layers being in the repository by then.
    assert len(pushed) == tags + 4 * 5 + 3, "\n".join(pushed)
    # pin: the manifest and the config of each tag, nothing else.
    assert [r.split(" ")[0] for r in asked] == ["GET"] * 2 * tags, "\n".join(asked)


# ---- R5-4: harvest --diff never pulls ------------------------------------------------------------


class LyingEngine:
    """A Docker engine stand-in on a unix socket: it has no image, claims every pull works, records all."""

    def __init__(self, sock: Path) -> None:
        self.sock = sock
        self.calls: list[str] = []
        engine = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def address_string(self) -> str:
                return "unix"

            def _answer(self) -> None:
                engine.calls.append(f"{self.command} {self.path}")
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                path = re.sub(r"^/v[0-9.]+", "", self.path.split("?")[0])
                if path == "/_ping":
                    return self._send(200, b"OK", "text/plain")
                if path == "/version":
                    return self._send(200, json.dumps({"ApiVersion": "1.45", "Version": "26.1.5"}).encode())
                if path == "/images/create":  # the lie: every pull "works"
                    return self._send(200, json.dumps({"status": "Downloaded newer image"}).encode())
                return self._send(404, json.dumps({"message": f"No such image: {path}"}).encode())

            def _send(self, status: int, body: bytes, kind: str = "application/json") -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_HEAD = do_DELETE = _answer

        self.server = socketserver.ThreadingUnixStreamServer(str(sock), Handler)
        self.server.daemon_threads = True

    def __enter__(self) -> LyingEngine:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def lying_engine(tmp_path: Path) -> Iterator[LyingEngine]:
    with LyingEngine(tmp_path / "engine.sock") as engine:
        yield engine


@pytest.mark.parametrize("root", ["build/assets", "assets:latest", "library/ubuntu@sha256:" + "a" * 64])
def test_harvest_diff_never_pulls_a_reference_without_its_registry_host(
    lying_engine: LyingEngine, tmp_path: Path, root: str
) -> None:
    (tmp_path / "cache").mkdir()
    env = {"DOCKER_HOST": f"unix://{lying_engine.sock}"}
    proc = bake("harvest", "--diff", root, tmp_path / "cache", cwd=tmp_path, env=env)
    assert proc.returncode == 2, proc.stderr
    assert f"--diff {root}: not a directory, and not an image the engine has" in proc.stderr
    assert "registry host" in proc.stderr and "Traceback" not in proc.stderr
    assert not [c for c in lying_engine.calls if "/images/create" in c], lying_engine.calls


@pytest.mark.parametrize("root", ["./build/assets", "/nonexistent/assets", "Build/Assets", "a b"])
def test_harvest_diff_refuses_a_missing_directory_before_asking_any_engine(
    lying_engine: LyingEngine, tmp_path: Path, root: str
) -> None:
    (tmp_path / "cache").mkdir()
    env = {"DOCKER_HOST": f"unix://{lying_engine.sock}"}
    proc = bake("harvest", "--diff", root, tmp_path / "cache", cwd=tmp_path, env=env)
    assert proc.returncode == 2 and f"--diff {root}: not a directory" in proc.stderr, proc.stderr
    assert lying_engine.calls == [], "no engine is asked about a path"


@pytest.fixture
def local_root_image(engine: None, tmp_path: Path) -> Iterator[str]:
    """An image only the engine has, named without a registry host: a sealed root's lock, imported."""
    import docker

    tree = tmp_path / "root.tar"
    lock = json.dumps({"version": 1, "manifest_digest": "0" * 64, "assets": []}).encode()
    with tarfile.open(tree, "w") as tar:
        info = tarfile.TarInfo("opt/bake/assets/bake.lock.json")
        info.size = len(lock)
        tar.addfile(info, io.BytesIO(lock))
    ref = f"rel-harvest-root:{uuid.uuid4().hex[:10]}"
    client = docker.from_env()
    client.api.import_image(src=str(tree), repository=ref.split(":")[0], tag=ref.split(":")[1])
    try:
        yield ref
    finally:
        client.images.remove(ref, force=True)
        client.close()


@pytest.mark.docker
def test_harvest_diff_reads_an_image_the_engine_has_without_its_host(
    local_root_image: str, tmp_path: Path
) -> None:
    (tmp_path / "cache").mkdir()
    proc = bake("harvest", "--diff", local_root_image, tmp_path / "cache", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert f"bake: {local_root_image} has everything the caches hold" in proc.stdout


# ---- R5-6: layer limits at manifest check --------------------------------------------------------


def many(tmp_path: Path, count: int, layer: str | None = None) -> Path:
    entries = []
    for i in range(count):
        entry = asset_entry(f"f{i:03}", f"data/f{i:03}.bin", blob(16, i), f"https://example.org/f{i}")
        entries.append({**entry, "layer": layer} if layer else entry)
    path = tmp_path / f"many-{count}-{layer}.toml"
    path.write_text(manifest_text(entries))
    return path


def test_more_units_than_an_image_can_run_on_are_refused_before_anything_is_built(tmp_path: Path) -> None:
    manifest = many(tmp_path, 130)
    (tmp_path / "Dockerfile").write_text("COPY --from=r.example/x / /\n")
    for command in (
        ["manifest", "check", "--manifest", manifest],
        ["publish", "--manifest", manifest, "--repository", "r.example/x"],
        ["pin", "--manifest", manifest, "--repository", "r.example/x", "Dockerfile"],
    ):
        proc = bake(*command, cwd=tmp_path, env=NO_ENGINE)
        assert proc.returncode == 2, (command, proc.stderr)
        assert "131 image layers (130 units and the index)" in proc.stderr and "could run" in proc.stderr
        assert (
            'layer = "NAME"' in proc.stderr
            and 'the 130 assets under data/ could all take layer = "data"' in (proc.stderr)
        )


def test_more_units_than_the_budget_warn_and_a_layer_group_is_one_unit(tmp_path: Path) -> None:
    warned = bake("manifest", "check", "--manifest", many(tmp_path, 70), cwd=tmp_path)
    assert warned.returncode == 0, warned.stderr
    assert "bake: warning: the selection makes 71 image layers" in warned.stderr
    assert "keeps to 64" in warned.stderr
    grouped = bake("manifest", "check", "--manifest", many(tmp_path, 130, "data"), cwd=tmp_path)
    assert grouped.returncode == 0 and "image layers" not in grouped.stderr, grouped.stderr


# ---- R5-7: exact matching ------------------------------------------------------------------------

HEX = sha256(b"vocab")
COMMIT = "c" * 40
BLOB = hashlib.sha1(b"blob 3\x00abc").hexdigest()


def hub_entry(**changes: str) -> str:
    keys = {"commit": COMMIT, "sha256": sha256(b"abc"), "blob": BLOB, **changes}
    sha, blob_id = json.dumps(keys["sha256"]), json.dumps(keys["blob"])
    return (
        f'[[hub]]\nrepo = "org/tiny"\ncommit = {json.dumps(keys["commit"])}\nfiles = [\n'
        f'  {{path = "a.txt", size = 3, sha256 = {sha}, blob = {blob_id}}},\n]\n'
    )


TRAILING_NEWLINE = {
    "asset sha256": manifest_text(
        [{"name": "v", "path": "data/v", "sha256": HEX + "\n", "urls": ["https://example.org/v"]}]
    ),
    "hub commit": hub_entry(commit=COMMIT + "\n"),
    "hub file sha256": hub_entry(sha256=sha256(b"abc") + "\n"),
    "hub file blob": hub_entry(blob=BLOB + "\n"),
    "asset name": manifest_text(
        [{"name": "v\n", "path": "data/v", "sha256": HEX, "urls": ["https://x.org/v"]}]
    ),
    "consumer name": '[[consumer]]\nname = "w\\n"\nlocations = ["$W_CACHE"]\n'
    + manifest_text([{"name": "v", "path": "data/v", "sha256": HEX, "urls": ["https://example.org/v"]}]),
}


@pytest.mark.parametrize("text", TRAILING_NEWLINE.values(), ids=TRAILING_NEWLINE.keys())
def test_a_value_with_a_trailing_newline_is_refused(tmp_path: Path, text: str) -> None:
    manifest = tmp_path / "assets.toml"
    manifest.write_text(text)
    for command in (["manifest", "check"], ["manifest", "digest"]):
        proc = bake(*command, "--manifest", manifest, cwd=tmp_path)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, (command, proc.stderr)


def test_harvest_pins_no_snapshot_whose_name_ends_in_a_newline(tmp_path: Path) -> None:
    folder = tmp_path / "hf" / "hub" / "models--org--tiny"
    (folder / "blobs").mkdir(parents=True)
    (folder / "blobs" / BLOB).write_bytes(b"abc")
    snapshot = folder / "snapshots" / f"{COMMIT}\n"
    snapshot.mkdir(parents=True)
    (snapshot / "a.txt").symlink_to(f"../../blobs/{BLOB}")
    manifest = tmp_path / "assets.toml"
    proc = bake("harvest", tmp_path / "hf", "--manifest", manifest, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "not named by a full commit" in proc.stderr
    assert not manifest.exists(), "nothing pinnable: no manifest is started"


def test_no_pattern_in_bake_ends_in_a_dollar() -> None:
    """``$`` also matches before a final newline; bake's patterns match whole values (fullmatch, ``\\Z``)."""
    found = []
    for path in sorted(BAKE_PACKAGE.rglob("*.py")):
        if "_vendor" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            call = node if isinstance(node, ast.Call) else None
            if call is None or not isinstance(call.func, ast.Attribute) or not call.args:
                continue
            if call.func.attr in ("compile", "match", "fullmatch", "search") and isinstance(
                call.func.value, ast.Name
            ):
                first = call.args[0]
                text = ast.unparse(first)
                if call.func.value.id == "re" and text.rstrip("'\"").endswith("$"):
                    found.append(f"{path.relative_to(BAKE_PACKAGE)}:{call.lineno}: {text}")
    assert found == []


def test_sha256_with_its_prefix_is_accepted_and_written_bare(tmp_path: Path) -> None:
    data = blob(100, "prefixed")
    bare = manifest_text([asset_entry("p", "data/p.bin", data, "https://example.org/p")])
    prefixed = bare.replace(f'"{sha256(data)}"', f'"sha256:{sha256(data).upper()}"')
    assert prefixed != bare
    digests = []
    for text in (bare, prefixed, hub_entry(sha256="sha256:" + sha256(b"abc"))):
        manifest = tmp_path / "assets.toml"
        manifest.write_text(text)
        proc = bake("manifest", "digest", "--manifest", manifest, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        digests.append(proc.stdout)
    assert digests[0] == digests[1]
    shown = bake("manifest", "--manifest", tmp_path / "assets.toml", cwd=tmp_path)
    assert f'"sha256": "{sha256(b"abc")}"' in shown.stdout


def test_add_takes_sha256_with_its_prefix_and_writes_it_bare(mirror: Mirror, tmp_path: Path) -> None:
    data = blob(1000, "add-prefixed")
    mirror.add("/data/p.bin", data)
    manifest = tmp_path / "assets.toml"
    proc = bake(
        "add", mirror.url("/data/p.bin"), "--path", "data/p.bin", "--manifest", manifest,
        "--sha256", f"sha256:{sha256(data)}", "--cache-dir", tmp_path / "cache", cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert f'sha256 = "{sha256(data)}"' in manifest.read_text() and "sha256:" not in manifest.read_text()


# ---- R5-8: harvest starts a manifest that holds no entry yet --------------------------------------


@pytest.mark.parametrize("text", ["# the site's assets, pinned by harvest\n", ""], ids=["a comment", "empty"])
def test_harvest_starts_a_manifest_of_comments_or_nothing(tmp_path: Path, text: str) -> None:
    folder = tmp_path / "hf" / "hub" / "models--org--tiny"
    (folder / "blobs").mkdir(parents=True)
    (folder / "blobs" / BLOB).write_bytes(b"abc")
    (folder / "snapshots" / COMMIT).mkdir(parents=True)
    (folder / "snapshots" / COMMIT / "a.txt").symlink_to(f"../../blobs/{BLOB}")
    manifest = tmp_path / "assets.toml"
    manifest.write_text(text)
    proc = bake("harvest", tmp_path / "hf", "--manifest", manifest, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    after = manifest.read_text()
    assert after.startswith(text) and f'commit = "{COMMIT}"' in after
    assert bake("manifest", "check", "--manifest", manifest, cwd=tmp_path).returncode == 0


# ---- observation: a large file says so as harvest reads it ---------------------------------------


def test_a_large_cached_file_shows_progress_as_it_is_hashed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "blob"
    path.write_bytes(b"x" * (3 << 20))
    monkeypatch.setattr(scan, "PROGRESS_ABOVE", 1 << 20)
    monkeypatch.setattr(scan, "PROGRESS_EVERY", 0.0)
    with caplog.at_level(logging.INFO, logger="bake.hub.scan"):
        read = b"".join(scan.read_regular(str(path)))
    assert len(read) == 3 << 20
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0].startswith(f"reading {path} (") and lines[0].endswith("GiB) to hash it")
    assert len(lines) >= 3 and all(line.startswith(f"reading {path}: ") for line in lines[1:]), lines
    small = tmp_path / "small"
    small.write_bytes(b"y" * 1000)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="bake.hub.scan"):
        b"".join(scan.read_regular(str(small)))
    assert caplog.records == []


def test_an_image_under_test_is_never_pulled_without_its_registry_host(
    lying_engine: LyingEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """bake.testing's image (``--bake-image``) follows the same rule as harvest's ROOT."""
    from bake.testing.image import ImageUnderTest, NotInEngine

    monkeypatch.setenv("DOCKER_HOST", f"unix://{lying_engine.sock}")
    with pytest.raises(NotInEngine, match="bake pulls only an image named with its registry host"):
        ImageUnderTest("rocm/vllm-ci:latest")
    assert not [c for c in lying_engine.calls if "/images/create" in c], lying_engine.calls
