"""Hub repositories as assets: the [[hub]] schema, `bake add hf://…`, both downloaders, the cache layout.

Everything runs against tests/hub_server.py, a loopback Hub with a separate CDN
origin, driven by huggingface_hub itself (HF_ENDPOINT), never mocked. The offline
checks run huggingface_hub in a fresh interpreter, since it reads HF_HUB_CACHE and
HF_HUB_OFFLINE when it is imported.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bake import consumers, servefile
from bake.errors import ManifestError
from bake.hub import layout, schema
from bake.manifest import manifest_digest, parse_manifest
from tests.hub_server import LoopbackHub
from tests.isolation import NETWORK_ENV
from tests.runners import bake

TOKEN = "hf_bakeTestToken0123456789abcdefXYZ"
CONFIG = b'{"model_type": "bert", "hidden_size": 8}\n'
LFS_DATA = hashlib.sha256(b"weights").digest() * (64 * 1024)  # 2 MiB, served by the CDN
PRELUDE = '# site manifest: comments, order and spacing must survive `bake add`\n\n[[asset]]\nname = "x"\n'


def _prelude_asset() -> str:
    data_sha = hashlib.sha256(b"x").hexdigest()
    return (
        PRELUDE
        + f'path = "other/x.bin"\nsha256 = "{data_sha}"   # keep me\nurls = ["file:///nonexistent/x.bin"]\n'
    )


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoopbackHub]:
    server = LoopbackHub(tmp_path_factory.mktemp("hub"))
    server.commit("org/old", {"config.json": b"{}\n"}, ref=None)
    server.commit(
        "org/tiny",
        {
            "config.json": CONFIG,
            "tokenizer/vocab.txt": b"[PAD]\n[UNK]\nhello\n",
            "same.json": CONFIG,  # one blob behind two snapshot files
            "model.safetensors": (LFS_DATA, True),
        },
        ref="main",
    )
    server.commit(
        "org/gated", {"config.json": b'{"gated": true}\n', "w.bin": (LFS_DATA[:65536], True)}, token=TOKEN
    )
    server.commit("org/table", {"data/train.csv": b"a,b\n1,2\n", "README.md": b"# ds\n"}, kind="dataset")
    with server:
        yield server


@pytest.fixture
def env(hub: LoopbackHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The environment of every bake call: the loopback Hub, and caches inside tmp_path."""
    for var in (*NETWORK_ENV, "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    return {
        "HF_ENDPOINT": hub.endpoint,
        "XDG_CACHE_HOME": str(tmp_path / "xdg"),
        "HF_HOME": str(tmp_path / "hf-home"),
        "HF_HUB_DISABLE_XET": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
    }


def add(manifest: Path, env: dict, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    proc = bake("add", *args, "--manifest", str(manifest), env=env)
    if ok:
        assert proc.returncode == 0, proc.stderr
    return proc


def fetch_and_seal(manifest: Path, dest: Path, env: dict, *extra: str) -> subprocess.CompletedProcess[str]:
    proc = bake("fetch", "--manifest", str(manifest), "--dest", str(dest), "-q", *extra, env=env)
    if proc.returncode == 0:
        sealed = bake("seal", "--manifest", str(manifest), "--dest", str(dest), env=env)
        assert sealed.returncode == 0, sealed.stderr
    return proc


def offline_python(code: str, cache: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter with HF_HUB_CACHE=cache and HF_HUB_OFFLINE=1."""
    full = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_"))}
    full |= {"HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1", "HF_ENDPOINT": "http://127.0.0.1:9", **env}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full, timeout=120)


def tree(root: Path) -> dict[str, tuple]:
    """Every path under root: type, mode, and the content or link target."""
    out = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        body = os.readlink(path) if path.is_symlink() else path.read_bytes() if path.is_file() else None
        out[str(path.relative_to(root))] = (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), body)
    return out


def serve_records(assets: list) -> list:
    """The bake.serve records of the Hub entries ``assets`` hold whole (the Hub's entry of the table)."""
    return consumers.Hub(schema.selected_entries(assets)).serve_records([], {})


def entries_of(text: str) -> list[schema.HubEntry]:
    return schema.selected_entries(parse_manifest(text, allow_http=True))


def set_downloader(manifest: Path, downloader: str) -> None:
    text = manifest.read_text()
    if downloader != "bake":
        text = text.replace('commit = "', f'downloader = "{downloader}"\ncommit = "')
    manifest.write_text(text)


# -- the schema --------------------------------------------------------------

COMMIT = "a" * 40
SHA = "b" * 64
BLOB = "c" * 40


def entry(**overrides: str) -> str:
    base = {
        "repo": '"org/tiny"',
        "commit": f'"{COMMIT}"',
        "files": f'[{{path = "config.json", size = 3, sha256 = "{SHA}", blob = "{BLOB}"}}]',
    }
    base.update(overrides)
    return "[[hub]]\n" + "".join(f"{k} = {v}\n" for k, v in base.items() if v is not None)


def test_an_entry_becomes_one_asset_per_blob() -> None:
    files = (
        f'[{{path = "a.json", size = 3, sha256 = "{SHA}", blob = "{BLOB}"}}, '
        f'{{path = "b/a.json", size = 3, sha256 = "{SHA}", blob = "{BLOB}"}}, '
        f'{{path = "w.bin", size = 9, sha256 = "{"d" * 64}", blob = "{"e" * 40}", lfs = true}}]'
    )
    assets = parse_manifest(entry(files=files, groups='["vllm"]'))
    assert [(a.path, a.sha256, a.size, a.groups) for a in assets] == [
        (f"hub/models--org--tiny/blobs/{BLOB}", SHA, 3, ("vllm",)),
        (f"hub/models--org--tiny/blobs/{'d' * 64}", "d" * 64, 9, ("vllm",)),
    ]
    assert assets[0].urls == (f"hf://org/tiny@{COMMIT}/a.json", f"hf://org/tiny@{COMMIT}/b/a.json")
    assert assets[0].name == f"org/tiny@{COMMIT[:12]}/a.json"


def rec(path: str = "a", size: int = 1, sha256: str = SHA, blob: str = BLOB, **more: object) -> str:
    """One file record as TOML text (strings through json.dumps, which TOML reads the same)."""
    fields = {"path": path, "size": size, "sha256": sha256, "blob": blob, **more}
    return "{" + ", ".join(f"{k} = {json.dumps(v)}" for k, v in fields.items()) + "}"


def files(*records: str) -> str:
    return "[" + ", ".join(records) + "]"


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"revision": '"main"'}, "unknown key(s) revision"),
        ({"commit": '"abc123"'}, "full 40-hex commit SHA"),
        ({"repo": '"tiny"'}, "repo must be ORG/NAME"),
        ({"repo": '"org/a--b"'}, "repo must be ORG/NAME"),
        ({"type": '"space"'}, "type must be one of model, dataset"),
        ({"ref": f'"{COMMIT}"'}, "is a commit SHA"),
        ({"ref": '"../main"'}, "normalised relative path"),
        ({"downloader": '"curl"'}, "downloader must be one of"),
        ({"files": "[]"}, "files must be a non-empty list"),
        ({"files": files(rec(path="../x"))}, "no '..'"),
        ({"files": files(rec(path="a\tb"))}, "control characters"),
        ({"files": files(rec(x=1))}, "unknown key(s) x"),
        ({"files": files(rec(size=-1))}, "size must be"),
        ({"files": files(rec(sha256=SHA[:-1]))}, "sha256 must be"),
        ({"files": files(rec(blob="x"))}, "git blob id"),
        ({"files": files(rec(lfs=1))}, "lfs must be"),
        ({"files": files(rec(), rec())}, "listed twice"),
        ({"files": files(rec(), rec(path="b", size=2))}, "the records disagree"),
        ({"files": files(rec(), rec(path="a/b"))}, "which is a file"),
    ],
)
def test_a_bad_entry_is_refused_naming_it(overrides: dict, expected: str) -> None:
    with pytest.raises(ManifestError, match="hub") as info:
        parse_manifest(entry(**overrides))
    assert expected in str(info.value)


_HOSTILE = st.text(alphabet=st.sampled_from(list("ab/.\\-_ \t\n?#%*~@0f")), max_size=12)
_VALUE = st.one_of(
    _HOSTILE,
    st.integers(-2, 2**40),
    st.booleans(),
    st.lists(_HOSTILE, max_size=2),
    st.sampled_from([SHA, BLOB]),
)


@settings(
    max_examples=300 if os.environ.get("CI") else 100, derandomize=bool(os.environ.get("CI")), deadline=None
)
@given(
    st.dictionaries(st.sampled_from(["path", "size", "sha256", "blob", "lfs", "x"]), _VALUE, max_size=6),
    st.dictionaries(st.sampled_from(["repo", "commit", "ref", "type", "include", "downloader"]), _VALUE),
)
def test_any_hub_entry_is_parsed_or_refused_with_exit_2(record: dict, head: dict) -> None:
    """Whatever a [[hub]] table holds, the parser returns assets or raises ManifestError, nothing else."""
    import tomlkit

    base = {"path": "a", "size": 1, "sha256": SHA, "blob": BLOB}
    table = {"repo": "org/tiny", "commit": COMMIT, **head, "files": [{**base, **record}]}
    try:
        assets = parse_manifest(tomlkit.dumps({"hub": [table]}))
    except ManifestError:
        return
    for asset in assets:  # what was accepted is safe to lay out and to serve
        assert asset.path.startswith("hub/models--") and "\t" not in asset.name and ".." not in asset.path
        records = serve_records(assets)
        assert servefile.read(servefile.write(records)).refused == []  # the entrypoint reads them all


def test_bad_manifests_exit_2_through_the_cli(tmp_path: Path) -> None:
    manifest = tmp_path / "m.toml"
    manifest.write_text(entry() + entry())
    proc = bake("manifest", "--manifest", str(manifest))
    assert proc.returncode == 2
    assert f"org/tiny@{COMMIT}: pinned twice" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_an_asset_may_not_use_the_hub_prefix() -> None:
    text = f'[[asset]]\nname = "a"\npath = "hub/x"\nsha256 = "{SHA}"\nurls = ["https://example.org/x"]\n'
    with pytest.raises(ManifestError, match="kept for"):
        parse_manifest(text)


def test_digest_covers_hub_entries_and_is_unchanged_without_them() -> None:
    plain = f'[[asset]]\nname = "a"\npath = "a/x"\nsha256 = "{SHA}"\nurls = ["https://example.org/x"]\n'
    assets = parse_manifest(plain)
    listing = [{"path": "a/x", "sha256": SHA, "size": None}]
    expected = hashlib.sha256(json.dumps(listing, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    assert manifest_digest(assets) == expected
    renamed = entry(files=f'[{{path = "renamed.json", size = 3, sha256 = "{SHA}", blob = "{BLOB}"}}]')
    same_blobs = [manifest_digest(parse_manifest(plain + e)) for e in (entry(), renamed, entry(ref='"main"'))]
    assert len(set(same_blobs)) == 3  # same blob bytes, different layouts: different digests
    # The threshold cuts a Hub entry's files into units, so the index and whole images differ with it.
    units = "[units]\nhub_file_threshold = 1\n"
    assert manifest_digest(parse_manifest(units + plain + entry())) != same_blobs[0]
    assert manifest_digest(parse_manifest(units + plain)) == expected  # no Hub entry: no difference


def test_tree_listing_is_what_huggingface_hub_writes(tmp_path: Path) -> None:
    from huggingface_hub._tree_cache import TreeCacheEntry, write_tree_cache

    files = f'[{{path = "z.json", size = 3, sha256 = "{SHA}", blob = "{BLOB}"}}, ' + (
        f'{{path = "a/w.bin", size = 9, sha256 = "{"d" * 64}", blob = "{"e" * 40}", lfs = true}}]'
    )
    (hub_entry,) = entries_of(entry(files=files))
    write_tree_cache(
        str(tmp_path),
        COMMIT,
        {
            "z.json": TreeCacheEntry(size=3, blob_id=BLOB),
            "a/w.bin": TreeCacheEntry(size=9, blob_id="e" * 40, lfs_sha256="d" * 64, lfs_size=9),
        },
    )
    assert (tmp_path / "trees" / f"{COMMIT}.json").read_text() == layout.tree_json(hub_entry)


def test_serve_records_follow_huggingface_hubs_precedence() -> None:
    files = f'[{{path = "d/c.json", size = 3, sha256 = "{SHA}", blob = "{BLOB}"}}]'
    records = serve_records(parse_manifest(entry(files=files, ref='"main"')))
    locs = [r for r in records if isinstance(r, servefile.Loc)]
    assert [(r.id, r.var, r.fallback) for r in locs] == [
        ("hub.xdg", "XDG_CACHE_HOME", "$HOME/.cache"),
        ("hub.home", "HF_HOME", "@hub.xdg"),
        ("hub.legacy", "HUGGINGFACE_HUB_CACHE", "@hub.home"),
        ("hub.0", "HF_HUB_CACHE", "@hub.legacy"),
    ]
    folder, ref = "models--org--tiny", hashlib.sha256(COMMIT.encode()).hexdigest()
    (the_set,) = [r for r in records if isinstance(r, servefile.ServedSet)]
    assert (the_set.consumer, the_set.state, the_set.root) == ("hub", ".locks/.bake", "hub")
    assert the_set.bytes == 3 + 40 + len(
        layout.tree_json(parse_manifest(entry(files=files))[-1].hub.entries[0])
    )
    # A blob is held by node storage only; the ref (and tree listing) by both views, copied.
    assert servefile.File("hub", "copied", f"{folder}/blobs/{BLOB}", 3, SHA) in records
    assert servefile.File("hub", "both", f"{folder}/refs/main", 40, ref) in records
    assert servefile.Place("hub", "copy", f"hub/{folder}/refs/main", f"{folder}/refs/main") in records
    # Every file of the commit is baked: the linked view links its snapshot directory whole.
    snapshot = f"{folder}/snapshots/{COMMIT}"
    assert servefile.Place("hub", "link", f"hub/{snapshot}", snapshot) in records
    assert servefile.Link("hub", f"{snapshot}/d/c.json", f"../../../blobs/{BLOB}") in records
    assert servefile.Dir("hub", "copied", f"{snapshot}/d") in records
    assert servefile.read(servefile.write(records)).refused == []
    plain = f'[[asset]]\nname = "a"\npath = "a/x"\nsha256 = "{SHA}"\nurls = ["https://e.org/x"]\n'
    assert serve_records(parse_manifest(plain)) == []


def test_a_narrowed_commit_is_linked_file_by_file() -> None:
    files = f'[{{path = "d/c.json", size = 3, sha256 = "{SHA}", blob = "{BLOB}"}}]'
    records = serve_records(parse_manifest(entry(files=files, include='["d/*"]')))
    snapshot = f"models--org--tiny/snapshots/{COMMIT}"
    assert servefile.Place("hub", "tree", f"hub/{snapshot}", snapshot) in records
    assert servefile.Dir("hub", "both", f"{snapshot}/d") in records
    assert not any(isinstance(r, servefile.File) and "/trees/" in r.name for r in records)


# -- bake add ------------------------------------------------------------------


def test_add_resolves_the_branch_and_records_every_file(hub: LoopbackHub, env: dict, tmp_path: Path) -> None:
    manifest = tmp_path / "assets.toml"
    manifest.write_text(_prelude_asset())
    before = hub.stats()
    add(manifest, env, "hf://org/tiny@main")
    text = manifest.read_text()
    assert text.startswith(_prelude_asset()), "the rest of the manifest must keep every byte"
    (entry_,) = entries_of(text)
    assert entry_.commit == hub.repos[("model", "org/tiny")]["refs"]["main"] and entry_.ref == "main"
    by_path = {f.path: f for f in entry_.files}
    assert set(by_path) == {"config.json", "tokenizer/vocab.txt", "same.json", "model.safetensors"}
    assert (
        by_path["model.safetensors"].lfs
        and by_path["model.safetensors"].sha256 == hashlib.sha256(LFS_DATA).hexdigest()
    )
    assert (
        by_path["config.json"].sha256 == hashlib.sha256(CONFIG).hexdigest() and not by_path["config.json"].lfs
    )
    # LFS hashes come from the Hub: adding never downloads the big file.
    assert hub.stats().get("cdn bytes", 0) == before.get("cdn bytes", 0)


def test_add_follows_the_paged_listing(hub: LoopbackHub, env: dict, tmp_path: Path) -> None:
    """The tree listing comes a page at a time (1,000 entries on the Hub); every page is read, once."""
    files = {f"d{i % 2}/f{i}.txt": b"%d\n" % i for i in range(5)}
    hub.commit("org/paged", files)
    hub.hostile("org/paged", page_size=2)  # honest answers, small pages
    before = hub.stats()
    manifest = tmp_path / "assets.toml"
    add(manifest, env, "hf://org/paged")
    (entry_,) = entries_of(manifest.read_text())
    assert sorted(f.path for f in entry_.files) == sorted(files)
    tree = [k for k in hub.stats() if k.startswith("hub GET /api/models/org/paged/tree/")]
    pages = sum(hub.stats()[k] - before.get(k, 0) for k in tree)
    assert pages == 4, "2 directories and 5 files, 2 entries a page: 4 pages, each asked for once"


def test_add_with_patterns_a_commit_and_a_dataset(hub: LoopbackHub, env: dict, tmp_path: Path) -> None:
    manifest = tmp_path / "assets.toml"
    commit = hub.repos[("model", "org/tiny")]["refs"]["main"]
    add(
        manifest,
        env,
        f"hf://org/tiny@{commit}",
        "--include",
        "*.json",
        "--exclude",
        "same.*",
        "--group",
        "vllm",
    )
    add(manifest, env, "hf://org/table", "--repo-type", "dataset")
    entries = sorted(entries_of(manifest.read_text()), key=lambda e: e.kind, reverse=True)
    assert [f.path for f in entries[0].files] == ["config.json"] and entries[0].ref is None
    assert entries[0].groups == ("vllm",) and not entries[0].whole_repo
    assert entries[1].kind == "dataset" and [f.path for f in entries[1].files] == [
        "README.md",
        "data/train.csv",
    ]


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["hf://org/nope"], 3, "refused the repository"),
        (["hf://org/tiny@no-such-branch"], 3, "does not know that commit"),
        (["hf://org/gated"], 3, "set HF_TOKEN or HF_TOKEN_FILE"),
        (["hf://datasets/org/table", "--repo-type", "model"], 2, "drop one of them"),
        (["hf://org/tiny", "--sha256", "0" * 64], 2, "--sha256 is for one file"),
        (["hf://org/tiny/config.json", "--include", "*.json"], 2, "--include is for hf://ORG/REPO"),
        (["hf://org/tiny"], 2, "pinned twice"),
    ],
)
def test_add_failures_write_nothing(
    args: list[str], code: int, message: str, env: dict, tmp_path: Path
) -> None:
    manifest = tmp_path / "assets.toml"
    add(manifest, env, "hf://org/tiny")
    before = manifest.read_bytes()
    proc = add(manifest, env, *args, ok=False)
    assert (proc.returncode, manifest.read_bytes()) == (code, before), proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr


# -- fetch, seal, and huggingface_hub offline ----------------------------------

OFFLINE_CHECK = """
import json
from pathlib import Path
from huggingface_hub import hf_hub_download as get, snapshot_download
out = {
    "by_commit": snapshot_download("org/tiny", revision=COMMIT),
    "by_ref": snapshot_download("org/tiny"),
    "file": Path(get("org/tiny", "tokenizer/vocab.txt", revision=COMMIT)).read_text(),
    "weights": get("org/tiny", "model.safetensors"),
    "dataset": Path(get("org/table", "data/train.csv", repo_type="dataset")).read_text(),
}
print(json.dumps(out))
"""


@pytest.fixture
def pinned(hub: LoopbackHub, env: dict, tmp_path: Path) -> Path:
    manifest = tmp_path / "assets.toml"
    add(manifest, env, "hf://org/tiny")
    add(manifest, env, "hf://datasets/org/table")
    return manifest


@pytest.mark.parametrize("downloader", ["bake", "huggingface_hub"])
def test_fetched_layout_serves_huggingface_hub_offline(
    downloader: str, pinned: Path, hub: LoopbackHub, env: dict, tmp_path: Path
) -> None:
    set_downloader(pinned, downloader)
    report = tmp_path / "report.json"
    proc = fetch_and_seal(pinned, tmp_path / "dest", env, "--json", str(report))
    assert proc.returncode == 0, proc.stderr
    commit = hub.repos[("model", "org/tiny")]["refs"]["main"]
    check = offline_python(OFFLINE_CHECK.replace("COMMIT", repr(commit)), tmp_path / "dest" / "hub")
    assert check.returncode == 0, check.stderr
    out = json.loads(check.stdout)
    snapshot = tmp_path / "dest" / "hub" / "models--org--tiny" / "snapshots" / commit
    assert out["by_commit"] == out["by_ref"] == str(snapshot)
    assert out["file"] == "[PAD]\n[UNK]\nhello\n" and out["dataset"] == "a,b\n1,2\n"
    assert Path(out["weights"]).read_bytes() == LFS_DATA
    sources = {r["name"].split("/", 2)[-1]: r["source"] for r in json.loads(report.read_text())["assets"]}
    assert sources["model.safetensors"].startswith("hf://org/tiny@")


def test_both_downloaders_give_the_same_layer(pinned: Path, env: dict, tmp_path: Path) -> None:
    trees = []
    for downloader in ("bake", "huggingface_hub"):
        set_downloader(pinned, downloader)
        env_one = dict(env, XDG_CACHE_HOME=str(tmp_path / f"xdg-{downloader}"))  # no shared cache
        assert fetch_and_seal(pinned, tmp_path / downloader, env_one).returncode == 0
        trees.append(tree(tmp_path / downloader))
    assert trees[0] == trees[1]
    assert any(kind == stat.S_IFLNK for kind, _, _ in trees[0].values())


@pytest.mark.parametrize("downloader", ["bake", "huggingface_hub"])
@pytest.mark.parametrize("change", ["changed", "missing"])
@pytest.mark.parametrize("path", ["tokenizer/vocab.txt", "model.safetensors"])
def test_origin_that_changed_after_add_fails_closed_naming_the_file(
    downloader: str, change: str, path: str, hub: LoopbackHub, env: dict, tmp_path: Path
) -> None:
    repo = f"org/drift-{downloader}-{change}-{path.replace('/', '-')}"
    commit = hub.commit(
        repo, {"tokenizer/vocab.txt": b"a\nb\n", "model.safetensors": (LFS_DATA[:4096], True)}
    )
    manifest = tmp_path / "assets.toml"
    add(manifest, env, f"hf://{repo}")
    set_downloader(manifest, downloader)
    lfs = path == "model.safetensors"
    hub.replace(repo, commit, path, None if change == "missing" else (b"x" * 4096 if lfs else b"a\nB\n"))
    proc = fetch_and_seal(manifest, tmp_path / "dest", env)
    assert proc.returncode == 3, proc.stderr
    assert f"{repo}@{commit[:12]}/{path}" in proc.stderr and "Traceback" not in proc.stderr
    recorded = {a.path: a.sha256 for a in parse_manifest(manifest.read_text())}
    landed = [p for p in (tmp_path / "dest").rglob("*") if p.is_file()]
    assert all(
        hashlib.sha256(p.read_bytes()).hexdigest() == recorded[str(p.relative_to(tmp_path / "dest"))]
        for p in landed
    )


@pytest.mark.parametrize("downloader", ["bake", "huggingface_hub"])
def test_the_token_reaches_the_hub_only_and_no_output(
    downloader: str, hub: LoopbackHub, env: dict, tmp_path: Path
) -> None:
    token_file = tmp_path / "secret"
    token_file.write_text(TOKEN + "\n")
    secret_env = dict(env, HF_TOKEN_FILE=str(token_file))
    manifest = tmp_path / "assets.toml"
    outputs = [add(manifest, secret_env, "hf://org/gated")]
    set_downloader(manifest, downloader)
    before = hub.stats().get("cdn authorization seen", 0)
    report = tmp_path / "report.json"
    outputs.append(fetch_and_seal(manifest, tmp_path / "dest", secret_env, "--json", str(report)))
    assert outputs[-1].returncode == 0, outputs[-1].stderr
    assert hub.stats().get("cdn authorization seen", 0) == before, "the token must never reach the CDN host"
    texts = [p.stdout + p.stderr for p in outputs] + [manifest.read_text(), report.read_text()]
    texts += [p.read_bytes().decode("latin-1") for p in (tmp_path / "dest").rglob("*") if p.is_file()]
    assert not [t for t in texts if TOKEN in t]
    no_token = fetch_and_seal(manifest, tmp_path / "dest2", dict(env, XDG_CACHE_HOME=str(tmp_path / "cold")))
    assert no_token.returncode == 3 and "HF_TOKEN" in no_token.stderr


def test_a_hub_down_for_a_moment_is_retried_by_bakes_policy(
    hub: LoopbackHub, env: dict, tmp_path: Path
) -> None:
    """huggingface_hub's own backoff never runs: a 503 is bake's to retry, within --attempts."""
    hub.commit("org/flaky", {"config.json": CONFIG})
    manifest = tmp_path / "assets.toml"
    add(manifest, env, "hf://org/flaky")
    set_downloader(manifest, "huggingface_hub")
    hub.hostile("org/flaky", fail_first=2)
    proc = fetch_and_seal(manifest, tmp_path / "dest", env, "--attempts", "3")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("HTTP 503") == 2 and "retrying in" in proc.stderr, proc.stderr
    hub.hostile("org/flaky", fail_first=100)
    cold = dict(env, XDG_CACHE_HOME=str(tmp_path / "cold"))
    gone = fetch_and_seal(manifest, tmp_path / "dest2", cold, "--attempts", "2")
    assert gone.returncode == 3 and "gave up after 2 attempts" in gone.stderr, gone.stderr


def test_no_origin_counts_hf_endpoint_as_a_rewrite(pinned: Path, env: dict, tmp_path: Path) -> None:
    assert fetch_and_seal(pinned, tmp_path / "dest", env, "--no-origin").returncode == 0
    without = {k: v for k, v in env.items() if k != "HF_ENDPOINT"}
    proc = bake(
        "fetch", "--manifest", str(pinned), "--dest", str(tmp_path / "d2"), "--no-origin", env=without
    )
    assert proc.returncode == 2 and "--no-origin" in proc.stderr


def test_a_writable_copy_of_the_layout_needs_no_request_online(
    pinned: Path, hub: LoopbackHub, env: dict, tmp_path: Path
) -> None:
    assert fetch_and_seal(pinned, tmp_path / "dest", env).returncode == 0
    cache = tmp_path / "copy"
    subprocess.run(["cp", "-a", str(tmp_path / "dest" / "hub"), str(cache)], check=True)
    subprocess.run(["chmod", "-R", "u+w", str(cache)], check=True)
    commit = hub.repos[("model", "org/tiny")]["refs"]["main"]
    before = hub.stats()
    code = f"from huggingface_hub import snapshot_download as s; print(s('org/tiny', revision={commit!r}))"
    proc = offline_python(code, cache, HF_HUB_OFFLINE="0", HF_ENDPOINT=hub.endpoint)
    assert proc.returncode == 0, proc.stderr
    after = hub.stats()
    resolves = {
        k: v - before.get(k, 0) for k, v in after.items() if "/resolve/" in k and v != before.get(k, 0)
    }
    assert resolves == {}, "the baked tree listing and snapshot answer everything"


def test_the_downloader_benchmark_runs_both_ways(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The measurement behind the default (tests/hub_bench.py), small: both downloaders land the files."""
    for var in NETWORK_ENV:
        monkeypatch.delenv(var, raising=False)
    from tests import hub_bench

    times = hub_bench.measure(size_mib=2, runs=1, rate_mib=None)
    assert set(times) == {"bake", "huggingface_hub"} and all(len(t) == 1 and t[0] > 0 for t in times.values())


def test_the_add_benchmark_runs_at_two_sizes() -> None:
    """The measurement behind the scale figures (tests/hub_bench.py --add-scale), small."""
    from tests import hub_bench

    for lfs in (True, False):
        times = hub_bench.measure_add([20, 60], lfs=lfs, runs=1)
        assert set(times) == {20, 60} and all(len(t) == 1 and t[0] > 0 for t in times.values())


def test_doctor_says_where_huggingface_hub_would_download(pinned: Path, env: dict, tmp_path: Path) -> None:
    assert fetch_and_seal(pinned, tmp_path / "dest", env).returncode == 0
    served = bake(
        "doctor", "--assets", str(tmp_path / "dest"), env={"HF_HUB_CACHE": str(tmp_path / "dest" / "hub")}
    )
    assert served.returncode == 0, served.stdout + served.stderr
    assert "ok  huggingface_hub  hub/models--org--tiny/snapshots/" in served.stdout
    assert "hub/models--org--tiny/refs/main" in served.stdout
    empty = tmp_path / "empty-home"
    empty.mkdir()
    missing = bake("doctor", "--assets", str(tmp_path / "dest"), env={"HF_HOME": str(empty)})
    assert missing.returncode == 3 and "WOULD DOWNLOAD  huggingface_hub" in missing.stdout
    assert f"{empty}/hub/models--org--tiny/snapshots/" in missing.stdout


def test_the_index_covers_the_refs_and_trees_seal_writes(pinned: Path, env: dict, tmp_path: Path) -> None:
    """The entrypoint copies only what SHA256SUMS lets it verify; `sha256sum -c` checks them too."""
    dest = tmp_path / "dest"
    assert fetch_and_seal(pinned, dest, env).returncode == 0
    listed = {line.split("  ", 1)[1] for line in (dest / "SHA256SUMS").read_text().splitlines()}
    data = {str(p.relative_to(dest)) for p in (dest / "hub").rglob("*") if p.is_file() and not p.is_symlink()}
    assert data <= listed and any("/refs/" in p for p in data) and any("/trees/" in p for p in data)
    locked = {e["path"] for e in json.loads((dest / "bake.lock.json").read_text())["assets"]}
    assert locked == listed, "SHA256SUMS and the lock list the same files"
    check = subprocess.run(
        ["sha256sum", "--quiet", "-c", "SHA256SUMS"], cwd=dest, capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout + check.stderr
    again = bake("seal", "--manifest", str(pinned), "--dest", str(dest), env=env)
    assert again.returncode == 0, again.stderr


def test_a_mirror_of_the_files_serves_an_air_gapped_fetch(
    pinned: Path, hub: LoopbackHub, env: dict, tmp_path: Path
) -> None:
    """--mirror rewrites hf:// sources like any other: a plain directory copy, --no-origin, no Hub at all."""
    commit = hub.repos[("model", "org/tiny")]["refs"]["main"]
    mirror = tmp_path / "mirror" / "org" / "tiny" / commit
    files = {"config.json": CONFIG, "same.json": CONFIG, "tokenizer/vocab.txt": b"[PAD]\n[UNK]\nhello\n"}
    for name, data in {**files, "model.safetensors": LFS_DATA}.items():
        (mirror / name).parent.mkdir(parents=True, exist_ok=True)
        (mirror / name).write_bytes(data)
    rewrite = f"hf://org/tiny@{commit}/=file://{mirror}/"
    offline = {k: v for k, v in env.items() if k != "HF_ENDPOINT"}
    before = hub.stats()
    dest = str(tmp_path / "dest")
    proc = bake(
        "fetch", "--manifest", str(pinned), "--dest", dest, "--no-origin", "--mirror", rewrite, env=offline
    )
    # The dataset has no mirror: --no-origin refuses it by name, before any traffic.
    assert proc.returncode == 2 and "org/table" in proc.stderr
    ds_commit = hub.repos[("dataset", "org/table")]["refs"]["main"]
    ds_mirror = tmp_path / "mirror" / "datasets" / "org" / "table" / ds_commit
    for name, data in {"data/train.csv": b"a,b\n1,2\n", "README.md": b"# ds\n"}.items():
        (ds_mirror / name).parent.mkdir(parents=True, exist_ok=True)
        (ds_mirror / name).write_bytes(data)
    rewrites = [rewrite, f"hf://datasets/org/table@{ds_commit}/=file://{ds_mirror}/"]
    args = [a for r in rewrites for a in ("--mirror", r)]
    proc = fetch_and_seal(pinned, tmp_path / "dest", offline, "--no-origin", *args)
    assert proc.returncode == 0, proc.stderr
    assert hub.stats() == {**before, "hub GET /_stats": before.get("hub GET /_stats", 0) + 1}
    assert (
        tmp_path / "dest" / "hub" / "models--org--tiny" / "snapshots" / commit / "model.safetensors"
    ).read_bytes() == LFS_DATA
