"""Hub repositories as assets, end to end: pinned by `bake add hf://…`, fetched by both downloaders, read by
huggingface_hub offline.

The [[hub]] schema and the cache layout are tested in tests/hub/, `bake add hf://…` in tests/add/.

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
from pathlib import Path

import pytest

from bake.manifest import parse_manifest
from tests.hub_server import CONFIG, LFS_DATA, TOKEN, LoopbackHub
from tests.hub_server import bake_add as add
from tests.isolation import NETWORK_ENV
from tests.runners import bake


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


def set_downloader(manifest: Path, downloader: str) -> None:
    text = manifest.read_text()
    if downloader != "bake":
        text = text.replace('commit = "', f'downloader = "{downloader}"\ncommit = "')
    manifest.write_text(text)


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
