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
from bake.hub.layout import tree_json
from bake.manifest import parse_manifest
from tests.assets import checkpoint_bytes, mirror_args
from tests.baked import FILES, MIRROR_FILES, NAMES, S3_PATH, URLS, VOCAB_PATH, WHISPER_PATH, sha256
from tests.baked import serve as serve_files
from tests.hub_server import git_blob_id
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


def hub_entry(repo: str, files: dict[str, int | bytes], commit: str = COMMIT, threshold: int = 0) -> str:
    """A ``[[hub]]`` entry: each file a size (its bytes a letter repeated, which names its content) or
    bytes; files of at least ``threshold`` bytes are LFS files, their ETag their sha256."""
    records = []
    for i, (path, content) in enumerate(files.items()):
        data = content if isinstance(content, bytes) else bytes([97 + i % 26]) * content
        lfs = "true" if threshold and len(data) >= threshold else "false"
        records.append(
            f'{{path = "{path}", size = {len(data)}, sha256 = "{sha256(data)}", '
            f'blob = "{git_blob_id(data)}", lfs = {lfs}}}'
        )
    return f'[[hub]]\nrepo = "{repo}"\ncommit = "{commit}"\nref = "main"\nfiles = [{", ".join(records)}]\n'


# ---- what a unit is ------------------------------------------------------------------------------


def test_an_asset_a_layer_name_a_large_hub_file_and_a_hub_repository_are_each_one_unit() -> None:
    text = "\n".join(
        [
            "[units]\nhub_file_threshold = 100\n",
            asset("one", "data/one", b"1", "https://example.org/1"),
            asset("two", "data/two", b"2", "https://example.org/2", layer="small"),
            asset("three", "data/three", b"3", "https://example.org/3", layer="small"),
            hub_entry("org/tiny", {"config.json": 3, "model.safetensors": b"w" * 100}, threshold=100),
        ]
    )
    manifest = parse_manifest(text)
    units = layers.units_of(manifest)
    weights, folder = sha256(b"w" * 100), "hub/models--org--tiny"
    config = git_blob_id(b"a" * 3)
    assert [(u.name, u.paths) for u in units] == [
        ("asset.one", ("data/one",)),
        ("layer.small", ("data/three", "data/two")),
        (f"hub.blob.{weights[:16]}", (f"{folder}/blobs/{weights}",)),
        (
            "hub.models--org--tiny",
            (
                f"{folder}/blobs/{config}",
                f"{folder}/refs/main",
                f"{folder}/snapshots/{COMMIT}/config.json",
                f"{folder}/snapshots/{COMMIT}/model.safetensors",
                f"{folder}/trees/{COMMIT}.json",
            ),
        ),
    ]
    listing = len(tree_json(manifest.hub_entries[0]).encode())
    assert [u.size for u in units[2:]] == [100, 3 + len(COMMIT) + listing]  # links carry no bytes
    assert all(layers.UNIT_TAG.fullmatch(u.tag) and len(u.tag) <= 128 for u in units)


C2 = "b" * 40
MODEL = {"config.json": 3, "tokenizer.json": 20, "model.safetensors": 64 << 20}


def units_by_name(*entries: str) -> dict[str, layers.Unit]:
    return {u.name: u for u in layers.units_of(parse_manifest("\n".join(entries)))}


def test_a_config_only_bump_keeps_the_large_files_unit_and_changes_the_repositorys_own() -> None:
    before = units_by_name(hub_entry("org/m", MODEL, threshold=1 << 20))
    after = units_by_name(hub_entry("org/m", {**MODEL, "config.json": 4}, commit=C2, threshold=1 << 20))
    assert before.keys() == after.keys()  # the same names: each line of the block keeps its place
    (weights,) = [name for name in before if name.startswith("hub.blob.")]
    assert before[weights] == after[weights]  # the same tag: nothing of it moves
    assert before["hub.models--org--m"].key != after["hub.models--org--m"].key
    assert after["hub.models--org--m"].size < 1 << 20


def test_one_content_in_two_repositories_is_one_unit_holding_its_bytes_once() -> None:
    units = units_by_name(
        hub_entry("org/m", MODEL, threshold=1 << 20),
        hub_entry("org/fork", MODEL, commit=C2, threshold=1 << 20),
    )
    (name,) = [name for name in units if name.startswith("hub.blob.")]
    blob = f"blobs/{sha256(bytes([97 + 2]) * (64 << 20))}"
    shared = units[name]
    assert shared.paths == (f"hub/models--org--fork/{blob}", f"hub/models--org--m/{blob}")
    assert shared.hardlinks == ((shared.paths[1], shared.paths[0]),) and shared.size == 64 << 20
    assert list(units) == [name, "hub.models--org--m", "hub.models--org--fork"]  # large first, small last


def test_two_contents_whose_unit_names_collide_are_refused() -> None:
    """A unit's layer hard-links its paths to one content: two contents under one name never pass."""

    def entry(repo: str, sha: str) -> str:
        record = f'{{path = "w.bin", size = 100, sha256 = "{sha}", blob = "{"c" * 40}", lfs = true}}'
        return f'[[hub]]\nrepo = "{repo}"\ncommit = "{COMMIT}"\nfiles = [{record}]\n'

    text = (
        "[units]\nhub_file_threshold = 10\n" + entry("org/a", "d" * 64) + entry("org/b", "d" * 16 + "e" * 48)
    )
    with pytest.raises(ManifestError, match=r"share the first 16 hex digits that name unit hub\.blob\.d{16}"):
        layers.units_of(parse_manifest(text))


def test_the_default_threshold_and_the_manifests_own() -> None:
    files = {"small.bin": layers.HUB_FILE_THRESHOLD - 1, "large.bin": layers.HUB_FILE_THRESHOLD}
    default = units_by_name(hub_entry("org/m", files, threshold=1))
    assert len(default) == 2 and sum(name.startswith("hub.blob.") for name in default) == 1
    lower = units_by_name("[units]\nhub_file_threshold = 1\n", hub_entry("org/m", files, threshold=1))
    assert sum(name.startswith("hub.blob.") for name in lower) == 2


@pytest.mark.parametrize("value", ["0", "-1", '"16 MiB"', "true", "1.5"])
def test_a_bad_threshold_is_a_manifest_error_naming_the_key(value: str) -> None:
    text = f"[units]\nhub_file_threshold = {value}\n" + asset("one", "data/one", b"1", "https://e.org/1")
    with pytest.raises(ManifestError, match="hub_file_threshold must be a size in bytes"):
        parse_manifest(text)


def test_an_unknown_units_key_is_a_manifest_error() -> None:
    with pytest.raises(ManifestError, match=r"\[units\]: unknown key\(s\) budget"):
        parse_manifest("[units]\nbudget = 3\n" + asset("one", "data/one", b"1", "https://e.org/1"))


def small_assets(sizes: list[int | None], reverse: bool = False) -> str:
    """One asset a unit per size (its bytes that many ``x``; None: a size left out of the manifest);
    ``reverse``: the same entries written in the other order."""
    entries = []
    for i, size in enumerate(sizes):
        entry = asset(f"a{i:03}", f"data/a{i:03}", b"x" * (size or 0), f"https://e.org/{i}")
        entries.append(entry if size is not None else entry.replace(f"size = {size or 0}\n", ""))
    return "\n".join(entries[::-1] if reverse else entries)


def test_past_the_budget_the_smallest_units_become_one_pack_the_same_every_time() -> None:
    sizes = [70 - i for i in range(70)]  # a000 is the largest: the smallest come last in the manifest
    units = layers.units_of(parse_manifest(small_assets(sizes)))
    block, chosen = layers.packed(units, 64)
    assert layers.layer_count(units) == 71 and layers.layer_count(block) == 64
    assert [u.name for u in chosen] == [f"asset.a{i:03}" for i in range(69, 61, -1)]  # the 8 smallest
    pack = block[-1]
    assert (pack.name, pack.size) == (layers.PACK, sum(range(1, 9)))
    assert pack.paths == tuple(sorted(path for u in chosen for path in u.paths))
    assert block[:-1] == units[:62], "the units left keep their order and their keys"
    shuffled = layers.units_of(parse_manifest(small_assets(sizes, reverse=True)))
    assert layers.packed(shuffled, 64)[0][-1] == pack  # the same units pack the same, in any order
    bumped = layers.units_of(parse_manifest(small_assets([*sizes[:-1], 2])))
    assert layers.packed(bumped, 64)[0][-1].key != pack.key  # a member changed: so did the pack


def test_within_the_budget_nothing_is_packed_and_an_unknown_size_packs_last() -> None:
    units = layers.units_of(parse_manifest(small_assets([3] * 63)))
    assert layers.packed(units, 64) == (units, ())
    unknown = layers.units_of(parse_manifest(small_assets([None, 5, 1, 2])))
    _, chosen = layers.packed(unknown, 4)  # 5 layers to 4: the two smallest become one
    assert [u.name for u in chosen] == ["asset.a002", "asset.a003"]
    _, chosen = layers.packed(unknown, 2)
    assert [u.name for u in chosen] == ["asset.a002", "asset.a003", "asset.a001", "asset.a000"]


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
    source = tmp / "source"
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
    return fetched_tree(tmp, manifest, mirrors), layers.units_of(parse_manifest(manifest.read_text()))


def fetched_tree(tmp: Path, manifest: Path, mirrors: list[str]) -> Path:
    """Fetch ``manifest`` (through ``mirrors`` alone) and seal it with bake; return the tree's tar, as
    the assets stage's export holds it."""
    dest = tmp / "dest"
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
    return tree


def hub_tree(
    tmp: Path, repos: dict[tuple[str, str], dict[str, bytes]]
) -> tuple[Path, tuple[layers.Unit, ...]]:
    """Fetch and seal Hub repositories ({(repo, commit): {path: bytes}}, files of 1 MiB or more LFS, and
    units of their own) from a plain copy of their files, and tar the tree; return it and the units."""
    text = "[units]\nhub_file_threshold = 1048576\n"
    mirrors = []
    for (repo, commit), files in repos.items():
        text += "\n" + hub_entry(repo, files, commit=commit, threshold=1 << 20)
        copy = tmp / "source" / repo / commit
        for path, data in files.items():
            (copy / path).parent.mkdir(parents=True, exist_ok=True)
            (copy / path).write_bytes(data)
        mirrors.append(f"--mirror=hf://{repo}@{commit}/={copy.as_uri()}/")
    manifest = tmp / "assets.toml"
    manifest.write_text(text)
    return fetched_tree(tmp, manifest, mirrors), layers.units_of(parse_manifest(text))


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


def listing(paths: list[Path]) -> dict:
    """Every entry of the tars stacked in order (a later one wins, as a layer above does): its type, mode,
    link target and the sha256 of its bytes; a hard link reads as the file it links to."""
    found = {}
    for path in paths:
        with tarfile.open(path) as tar:
            for m in tar.getmembers():
                data = tar.extractfile(m).read() if m.isfile() or m.islnk() else b""
                kind = tarfile.REGTYPE if m.islnk() else m.type
                link = "" if m.islnk() else m.linkname
                found[m.name.rstrip("/")] = (kind, m.mode, link, hashlib.sha256(data).hexdigest())
    return found


def test_the_units_and_index_rebuild_the_sealed_tree_exactly(tmp_path: Path) -> None:
    tree, units = sealed_tree(tmp_path, {VOCAB_PATH: FILES[VOCAB_PATH], WHISPER_PATH: FILES[WHISPER_PATH]})
    unit_tars, index = layers.split(tree, units, tmp_path)
    assert listing([*unit_tars.values(), index]) == listing([tree])


WEIGHTS_1M = checkpoint_bytes(1 << 20, seed=b"bake-layers-hub-weights")
CONFIG = b'{"model_type": "bert"}'


def test_hub_units_rebuild_the_tree_and_hold_a_shared_file_once(tmp_path: Path) -> None:
    """Two repositories share a large file: one unit, its bytes once and a hard link; each repository's
    own unit holds its small blobs, snapshot links, refs and tree; the index none of them."""
    model = {"config.json": CONFIG, "model.safetensors": WEIGHTS_1M}
    repos = {("org/m", COMMIT): model, ("org/fork", C2): {**model, "config.json": b"{}"}}
    tree, units = hub_tree(tmp_path, repos)
    unit_tars, index = layers.split(tree, units, tmp_path)
    assert listing([*unit_tars.values(), index]) == listing([tree])
    (shared,) = [u for u in units if u.name.startswith("hub.blob.")]
    with tarfile.open(unit_tars[shared.name]) as tar:
        files = [(m.name, m.type, m.linkname) for m in tar.getmembers() if not m.isdir()]
    first, second = (f"{layers.ROOT}/{path}" for path in shared.paths)
    assert files == [(first, tarfile.REGTYPE, ""), (second, tarfile.LNKTYPE, first)]
    assert unit_tars[shared.name].stat().st_size < len(WEIGHTS_1M) + 64 * 1024  # the bytes once
    with tarfile.open(unit_tars["hub.models--org--m"]) as tar:
        names = {m.name.removeprefix(f"{layers.ROOT}/hub/models--org--m/") for m in tar.getmembers()}
    assert {"refs/main", f"snapshots/{COMMIT}/config.json", f"trees/{COMMIT}.json"} <= names
    with tarfile.open(index) as tar:
        assert not [m.name for m in tar.getmembers() if "/hub/" in m.name and not m.isdir()]


def test_a_pack_of_every_unit_rebuilds_the_tree_and_keeps_the_shared_file_once(tmp_path: Path) -> None:
    model = {"config.json": CONFIG, "model.safetensors": WEIGHTS_1M}
    tree, units = hub_tree(tmp_path, {("org/m", COMMIT): model, ("org/fork", C2): model})
    block, chosen = layers.packed(units, 2)  # one unit and the index
    assert [u.name for u in block] == [layers.PACK] and len(chosen) == 3
    unit_tars, index = layers.split(tree, block, tmp_path)
    assert listing([*unit_tars.values(), index]) == listing([tree])
    with tarfile.open(unit_tars[layers.PACK]) as tar:
        assert sum(m.islnk() for m in tar.getmembers()) == 1


def test_a_large_files_layer_is_byte_identical_across_a_bump(tmp_path: Path) -> None:
    blobs = {}
    for commit, config in ((COMMIT, CONFIG), (C2, b"{}")):
        work = tmp_path / commit[:1]
        work.mkdir()
        tree, units = hub_tree(
            work, {("org/m", commit): {"config.json": config, "model.safetensors": WEIGHTS_1M}}
        )
        unit_tars, _ = layers.split(tree, units, work)
        blobs[commit] = {u.name: layers.compress(unit_tars[u.name]).digest for u in units}
    assert blobs[COMMIT].keys() == blobs[C2].keys()
    assert [name for name in blobs[COMMIT] if blobs[COMMIT][name] == blobs[C2][name]] == [
        f"hub.blob.{sha256(WEIGHTS_1M)[:16]}"
    ]


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
