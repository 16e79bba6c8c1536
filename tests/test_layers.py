"""Asset units and their layers (bake.layers, ``bake publish``): what a unit is, and that its layer's
bytes depend on that unit alone.

The unit and split cases run bake's own fetch and seal into a directory and tar it the way the
assets stage's tar export holds it; the docker cases publish to the toolchain's real registry
(127.0.0.1:5000) and read the registry's own manifests.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tarfile
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from bake import layers
from bake.errors import ManifestError
from bake.manifest import parse_manifest
from tests.assets import checkpoint_bytes, mirror_args
from tests.baked import FILES, MIRROR_FILES, NAMES, S3_PATH, URLS, VOCAB_PATH, WHISPER_PATH, sha256
from tests.baked import serve as serve_files
from tests.mirror import Mirror
from tests.registries import REGISTRY, remove_images_named
from tests.runners import REPO

COMMIT = "a" * 40
NOTES = b"".join(b"token %d hello world\n" % i for i in range(20000))
NOTES_PATH = "data/notes.txt"
WEIGHTS = checkpoint_bytes(4 << 20, seed=b"bake-layers-weights")
WEIGHTS_PATH = "data/weights.bin"
# Where the file:// mirror holds each consumer file (tests.baked's mirror layout).
MIRROR_PATH = {
    path: next(at.lstrip("/") for at, data in MIRROR_FILES.items() if data == FILES[path]) for path in FILES
}


def asset(name: str, path: str, data: bytes, url: str, layer: str | None = None) -> str:
    extra = f'layer = "{layer}"\n' if layer else ""
    return (
        f'[[asset]]\nname = "{name}"\npath = "{path}"\nsha256 = "{sha256(data)}"\nsize = {len(data)}\n'
        f'urls = ["{url}"]\n{extra}'
    )


def hub_entry(repo: str, blobs: list[str]) -> str:
    files = ", ".join(
        f'{{path = "f{i}.json", size = 3, sha256 = "{blob * 64}", blob = "{blob * 40}"}}'
        for i, blob in enumerate(blobs)
    )
    return f'[[hub]]\nrepo = "{repo}"\ncommit = "{COMMIT}"\nfiles = [{files}]\n'


# ---- what a unit is ------------------------------------------------------------------------------


def test_an_asset_a_layer_name_and_a_hub_repository_at_a_commit_are_each_one_unit() -> None:
    text = "\n".join(
        [
            asset("one", "data/one", b"1", "https://example.org/1"),
            asset("two", "data/two", b"2", "https://example.org/2", layer="small"),
            asset("three", "data/three", b"3", "https://example.org/3", layer="small"),
            hub_entry("org/tiny", ["b", "c"]),
        ]
    )
    units = layers.units_of(parse_manifest(text))
    assert [(u.name, u.paths) for u in units] == [
        ("asset.one", ("data/one",)),
        ("layer.small", ("data/three", "data/two")),
        (
            "hub.models--org--tiny.aaaaaaaaaaaa",
            tuple(f"hub/models--org--tiny/blobs/{c * 40}" for c in "bc"),
        ),
    ]
    assert all(layers.UNIT_TAG.fullmatch(u.tag) and len(u.tag) <= 128 for u in units)


def test_a_unit_key_names_its_own_entries_alone() -> None:
    one = asset("one", "data/one", b"1", "https://example.org/1")
    alone = layers.units_of(parse_manifest(one))
    beside = layers.units_of(
        parse_manifest(one + "\n" + asset("two", "data/two", b"2", "https://example.org/2"))
    )
    moved = layers.units_of(parse_manifest(one.replace("example.org", "mirror.example")))
    changed = layers.units_of(parse_manifest(asset("one", "data/one", b"9", "https://example.org/1")))
    assert alone[0] == beside[0] == moved[0]  # a URL is where to fetch, not what is baked
    assert changed[0].key != alone[0].key


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ('"a b"', "layer 'a b' must be a name"),
        ("3", "layer 3 must be a name"),
        (f'"{"x" * 49}"', "at most 48"),
    ],
    ids=["a space", "not a string", "too long for a tag"],
)
def test_a_bad_layer_name_is_a_manifest_error(value: str, says: str) -> None:
    text = asset("one", "data/one", b"1", "https://example.org/1") + f"layer = {value}\n"
    with pytest.raises(ManifestError, match=says):
        parse_manifest(text)


def test_a_long_asset_name_still_fits_a_tag_and_stays_apart() -> None:
    long = "n" * 100
    text = (
        asset(long, "data/a", b"1", "https://e.org/1")
        + "\n"
        + asset(long + "x", "data/b", b"2", "https://e.org/2")
    )
    first, second = layers.units_of(parse_manifest(text))
    assert len(first.tag) <= 128 and first.name != second.name


# ---- a unit's layer is the same whatever else the manifest holds ---------------------------------


def sealed_tree(tmp: Path, files: dict[str, bytes]) -> tuple[Path, tuple[layers.Unit, ...]]:
    """Fetch and seal ``files`` (path -> bytes) with bake, tar it as the assets stage's export holds it.

    The consumers' files come from a file:// mirror at their production URLs, so seal writes their
    alias links; any other path from an https://data.example.org/ URL, mirrored there too.
    """
    source, dest = tmp / "source", tmp / "dest"
    entries = []
    for i, (path, data) in enumerate(files.items()):
        at = source / (MIRROR_PATH[path] if path in URLS else f"example/{i}")
        at.parent.mkdir(parents=True, exist_ok=True)
        at.write_bytes(data)
        entries.append(
            asset(NAMES.get(path, f"f{i}"), path, data, URLS.get(path, f"https://data.example.org/{i}"))
        )
    manifest = tmp / "assets.toml"
    manifest.write_text("\n".join(entries))
    mirrors = [f"--mirror={m}" for m in mirror_args(source.as_uri())]
    for command in (["fetch", *mirrors, "--no-origin"], ["seal"]):
        subprocess.run(
            [sys.executable, "-m", "bake", *command, "--manifest", str(manifest), "--dest", str(dest)],
            check=True, capture_output=True,
            env={**os.environ, "PYTHONPATH": str(REPO), "XDG_CACHE_HOME": str(tmp / "c")},
        )  # fmt: skip
    tree = tmp / "tree.tar"
    with tarfile.open(tree, "w") as tar:
        for root, dirs, names in os.walk(dest):
            for name in dirs + names:
                os.utime(os.path.join(root, name), (0, 0), follow_symlinks=False)
        os.utime(dest, (0, 0))
        tar.add(dest, arcname="opt/bake/assets")
    return tree, layers.units_of(parse_manifest(manifest.read_text()))


def test_a_units_layer_is_byte_identical_beside_other_units_and_the_index_holds_the_rest(
    tmp_path: Path,
) -> None:
    shared = {VOCAB_PATH: FILES[VOCAB_PATH], WEIGHTS_PATH: WEIGHTS}
    blobs = {}
    for name, other in (("ab", {S3_PATH: FILES[S3_PATH]}), ("ac", {NOTES_PATH: NOTES})):
        tree, units = sealed_tree(tmp_path / name, {**shared, **other})
        unit_tars, index = layers.split(tree, units, tmp_path / name)
        blobs[name] = {unit.name: layers.compress(unit_tars[unit.name]) for unit in units}
        with tarfile.open(index) as tar:
            names = tar.getnames()
        assert f"{layers.ROOT}/bake.lock.json" in names and f"{layers.ROOT}/bake.serve" in names
        assert not [n for n in names if n.endswith((VOCAB_PATH, S3_PATH, NOTES_PATH))], names
        with tarfile.open(unit_tars[units[0].name]) as tar:
            members = tar.getmembers()
        assert [m.name for m in members if m.isfile()] == [f"{layers.ROOT}/{VOCAB_PATH}"]
        assert {(m.uid, m.gid, m.mtime) for m in members} == {(0, 0, 0)}
    vocab = f"asset.{NAMES[VOCAB_PATH]}"
    for shared_unit in (vocab, "asset.f1"):
        assert blobs["ab"][shared_unit].descriptor() == blobs["ac"][shared_unit].descriptor()
        assert blobs["ab"][shared_unit].path.read_bytes() == blobs["ac"][shared_unit].path.read_bytes()
    # Incompressible weights are stored as they are; text is zstd.
    assert blobs["ab"]["asset.f1"].media_type == layers.TAR
    assert blobs["ac"]["asset.f2"].media_type == f"{layers.TAR}+zstd"
    assert blobs["ac"]["asset.f2"].size < blobs["ac"]["asset.f2"].tar_size / 10


def test_the_units_and_index_rebuild_the_sealed_tree_exactly(tmp_path: Path) -> None:
    tree, units = sealed_tree(tmp_path, {VOCAB_PATH: FILES[VOCAB_PATH], WHISPER_PATH: FILES[WHISPER_PATH]})
    unit_tars, index = layers.split(tree, units, tmp_path)

    def listing(paths: list[Path]) -> dict:
        found = {}
        for path in paths:
            with tarfile.open(path) as tar:
                for m in tar.getmembers():
                    data = tar.extractfile(m).read() if m.isfile() else b""
                    found[m.name.rstrip("/")] = (m.type, m.mode, m.linkname, hashlib.sha256(data).hexdigest())
        return found

    assert listing([*unit_tars.values(), index]) == listing([tree])


# ---- published: the registry's manifests -----------------------------------------------------------

RUN = f"layers-{uuid.uuid4().hex[:12]}"
HOST_NETWORK = ["--", "--network=host", "--allow=network.host"]


@pytest.fixture(scope="module")
def mirror(engine: None) -> Iterator[Mirror]:
    with Mirror() as served:
        serve_files(served)
        served.add("/notes.txt", NOTES)
        served.add("/weights.bin", WEIGHTS)
        yield served
    remove_images_named(RUN)


def publish(mirror: Mirror, tmp: Path, others: dict[str, bytes]) -> tuple[str, list[list[str]]]:
    """Publish the vocab and ``others`` into a repository of its own; return it and stdout's lines."""
    tmp.mkdir()
    entries = [asset(NAMES[VOCAB_PATH], VOCAB_PATH, FILES[VOCAB_PATH], URLS[VOCAB_PATH])]
    for path, data in others.items():
        url = URLS.get(path) or mirror.url("/" + path.removeprefix("data/"))
        entries.append(
            asset(NAMES.get(path) or path.removeprefix("data/").partition(".")[0], path, data, url)
        )
    manifest = tmp / "assets.toml"
    manifest.write_text("\n".join(entries))
    repository = f"{REGISTRY}/bake-test/{RUN}-{tmp.name}"
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "ASSET_MIRRORS": " ".join(mirror_args(mirror.url("/").rstrip("/"))),
        "FETCH_IMAGE": "local/rocm-standin:bookworm",
    }
    proc = subprocess.run(
        [sys.executable, "-m", "bake", "publish", "--manifest", str(manifest), "--repository", repository,
         *HOST_NETWORK],
        cwd=tmp, env=env, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    return repository, [line.split() for line in proc.stdout.splitlines()]


def registry_manifest(pinned: str) -> dict:
    name, _, digest = pinned.partition("@")
    host, _, path = name.rpartition(":")[0].partition("/")
    request = urllib.request.Request(
        f"http://{host}/v2/{path}/manifests/{digest}", headers={"Accept": layers.MANIFEST_TYPE}
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.load(answer)


@pytest.mark.docker
def test_two_manifests_share_the_common_units_blob_in_the_registry(mirror: Mirror, tmp_path: Path) -> None:
    _, ab = publish(mirror, tmp_path / "ab", {WEIGHTS_PATH: WEIGHTS})
    _, ac = publish(mirror, tmp_path / "ac", {NOTES_PATH: NOTES})
    assert [line[0] for line in ab] == ["unit", "unit", "index", "image"]
    vocab = f"asset.{NAMES[VOCAB_PATH]}"
    (ab_vocab,) = [registry_manifest(line[2])["layers"] for line in ab if line[1:2] == [vocab]]
    (ac_vocab,) = [registry_manifest(line[2])["layers"] for line in ac if line[1:2] == [vocab]]
    assert ab_vocab == ac_vocab
    (weights,) = [registry_manifest(line[2])["layers"] for line in ab if line[1:2] == ["asset.weights"]]
    assert weights[0]["mediaType"] == layers.TAR, "incompressible weights are pushed uncompressed"
    (notes,) = [registry_manifest(line[2])["layers"] for line in ac if line[1:2] == ["asset.notes"]]
    assert notes[0]["mediaType"] == f"{layers.TAR}+zstd"
    whole = registry_manifest(ab[-1][1])["layers"]
    units = [registry_manifest(line[-1])["layers"][0] for line in ab[:-1]]
    assert whole == units, "the whole image is the unit layers and the index, the same blobs"
