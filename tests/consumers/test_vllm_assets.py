"""vLLM's public test assets, a built-in consumer, checked against a released vLLM's own code.

The rule (``bake.consumers.VllmAssets``, ``bake.consumers.vllm_assets``) is never restated here: vLLM
0.34.0's ``vllm/envs.py`` and ``vllm/assets/*.py`` run unchanged (``tests.vllm_site``), with
only the imports ``get_vllm_public_assets`` does not need stood in, and a download stand-in that
records and refuses. Where bake serves a file, vLLM's own function must return it with no
download; where vLLM's classes fetch a file from, bake's harvest and manifest check must say.
Only the module's own small parts (a bucket URL's prefix and file, an asset class's names) are
also tested alone, on made-up classes.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from bake import consumers
from bake.consumers import vllm_assets
from bake.manifest import load_manifest, parse_manifest
from tests.assets import VLLM_BUCKET, VLLM_RELEASE, sha256
from tests.runners import REPO, bake
from tests.serve import sealed
from tests.vllm_site import FILES, IMAGE, IMAGE_URL, SPECS, URLS, make_site, probe, released

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def release() -> Path:
    """vLLM 0.34.0's released files (downloaded once into .work/vllm)."""
    return released()


@pytest.fixture(scope="module")
def site(release: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_site(tmp_path_factory.mktemp("vllm-site"))


@pytest.fixture
def installed(release: Path, monkeypatch: pytest.MonkeyPatch) -> vllm_assets.Installed:
    """vLLM importable in this process (its released files on sys.path), as where it is installed."""
    monkeypatch.syspath_prepend(str(release))
    found = vllm_assets.installed()
    assert found is not None and found.version == VLLM_RELEASE
    return found


def vllm_env(release: Path, **env: str) -> dict[str, str]:
    """A ``bake`` subprocess's environment with vLLM installed (its released files importable)."""
    return {"PYTHONPATH": f"{release}{os.pathsep}{REPO}", **env}


# --- the lookup rule, against vLLM's own get_vllm_public_assets --------------------------

# Each case: the job's variables, given its root (absolute or relative, set or empty).
CASES: dict[str, Callable[[Path], dict[str, str]]] = {
    "nothing-set": lambda root: {},
    "XDG_CACHE_HOME": lambda root: {"XDG_CACHE_HOME": str(root / "xdg")},
    "VLLM_ASSETS_CACHE-wins": lambda root: {
        "VLLM_ASSETS_CACHE": str(root / "assets"),
        "XDG_CACHE_HOME": str(root / "xdg"),
    },
    "VLLM_ASSETS_CACHE-empty": lambda root: {"VLLM_ASSETS_CACHE": "", "XDG_CACHE_HOME": str(root / "xdg")},
    "XDG_CACHE_HOME-empty": lambda root: {"XDG_CACHE_HOME": ""},
    "relative-XDG_CACHE_HOME": lambda root: {"XDG_CACHE_HOME": "job/xdg"},
    "relative-VLLM_ASSETS_CACHE": lambda root: {"VLLM_ASSETS_CACHE": "job/assets"},
}


@pytest.mark.parametrize("case", CASES)
def test_bakes_rule_is_where_vllms_own_code_looks(
    site: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    env = {"HOME": str(tmp_path / "home"), **CASES[case](tmp_path)}
    monkeypatch.chdir(tmp_path)  # a relative or empty variable resolves against the job's directory
    where = consumers.VLLM_ASSETS_CACHE.resolve(env)
    assert where is not None
    for rel, data in FILES.items():
        (where / rel.split("/", 1)[1]).parent.mkdir(parents=True, exist_ok=True)
        (where / rel.split("/", 1)[1]).write_bytes(data)

    report = probe(site, env, tmp_path, *SPECS)

    assert report["downloads"] == []
    for spec, name in SPECS.items():  # vLLM's path may be relative: to the job's directory
        assert Path(report["cwd"], report["results"][spec]["path"]) == where / name, report


def test_each_class_fetches_under_the_prefix_bake_names(
    site: Path, tmp_path: Path, installed: vllm_assets.Installed
) -> None:
    """Every name of every class, through vLLM's own code on an empty cache: the URL its download
    asked for is the one bake's harvest gives the cached file, and the file it would have written is
    the path bake's naming rule gives that URL."""
    specs = {
        f"image:{n}:{ext}": f"{n}.{ext}" for n in _names(installed, "ImageAsset") for ext in ("jpg", "pt")
    }
    specs |= {f"audio:{n}": f"{n}.ogg" for n in _names(installed, "AudioAsset")}
    cache = tmp_path / "assets"
    report = probe(site, {"VLLM_ASSETS_CACHE": str(cache)}, tmp_path, *specs)

    asked = {Path(d["path"]).name: d for d in report["downloads"]}
    assert sorted(asked) == sorted(specs.values())
    consumer = consumers.VllmAssets()
    for name, download in asked.items():
        assert consumer.url_for_cached(name) == download["url"]
        assert cache / str(consumer.path_for_url(download["url"])) == Path(download["path"])
    assert {d["url"].rsplit("/", 2)[1] for d in asked.values()} == set(vllm_assets.RULE_PREFIXES)


def _names(installed: vllm_assets.Installed, cls: str) -> tuple[str, ...]:
    (found,) = [c for c in installed.classes if c.name == cls]
    return found.names


def test_without_vllm_the_naming_rule_still_drops_the_prefix() -> None:
    consumer = consumers.VllmAssets()
    assert consumer.path_for_url(IMAGE_URL) == "vllm_public_assets/stop_sign.jpg"
    assert consumer.path_for_url("https://example.org/vision_model_images/stop_sign.jpg") is None
    assert consumer.url_for_cached("stop_sign.jpg") is None  # no class to ask: the manifest names it


# --- the module's own parts, no vLLM needed ------------------------------------------------


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (IMAGE_URL, ("vision_model_images", "stop_sign.jpg")),
        (f"{VLLM_BUCKET}multimodal_asset/sub/winning_call.ogg", ("multimodal_asset/sub", "winning_call.ogg")),
        (f"{VLLM_BUCKET}stop_sign.jpg", ("", "stop_sign.jpg")),
        (f"{IMAGE_URL}?versionId=1", None),
        (f"{IMAGE_URL}#x", None),
        (f"{VLLM_BUCKET}vision_model_images/", None),
        (f"{VLLM_BUCKET}vision_model_images/..", None),
        ("https://example.org/vision_model_images/stop_sign.jpg", None),
    ],
)
def test_a_bucket_url_names_its_prefix_and_file(url: str, expected: tuple[str, str] | None) -> None:
    assert vllm_assets.bucket_file(url) == expected


def test_an_asset_class_asks_for_its_names_with_its_suffixes() -> None:
    audio = vllm_assets.AssetClass(
        "AudioAsset", "multimodal_asset", ("winning_call", "mary_had_lamb"), (".ogg",)
    )
    image = vllm_assets.AssetClass("ImageAsset", "vision_model_images", ("stop_sign",), None)
    names = ("winning_call.ogg", "winning_call.wav", "other.ogg", "winning_call")
    assert [audio.asks_for(n) for n in names] == [True, False, False, False]
    assert (
        image.asks_for("stop_sign.jpg") and image.asks_for("stop_sign.pt") and not image.asks_for("stop_sign")
    )
    lib = vllm_assets.Installed(
        "0.0", Path("envs.py"), VLLM_BUCKET.rstrip("/"), "vllm_public_assets", (audio, image)
    )
    assert lib.classes_for("stop_sign.jpg") == [image] and lib.classes_for("notes.txt") == []
    assert lib.url(image, "stop_sign.jpg") == IMAGE_URL
    assert lib.describe() == (
        "AudioAsset <name>.ogg under multimodal_asset/ (winning_call, mary_had_lamb); "
        "ImageAsset <name>.<ext> under vision_model_images/ (stop_sign)"
    )


# --- manifest rules: `bake manifest check` ------------------------------------------------


def entry(path: str, url: str, name: str = "stop_sign.jpg") -> str:
    return f'[[asset]]\nname = "{name}"\npath = "{path}"\nsha256 = "{sha256(IMAGE)}"\nurls = ["{url}"]\n'


@pytest.mark.parametrize(
    ("path", "url", "expected"),
    [
        pytest.param(
            "vllm_public_assets/vision_model_images/stop_sign.jpg",
            IMAGE_URL,
            "is not where vLLM looks: get_vllm_public_assets drops the bucket prefix and reads "
            "vllm_public_assets/stop_sign.jpg; write path = 'vllm_public_assets/stop_sign.jpg'",
            id="prefix-kept",
        ),
        pytest.param(
            "vllm_public_assets/cherry_blossom.jpg",
            IMAGE_URL,
            f"is not where vLLM keeps {IMAGE_URL}: it caches that file as vllm_public_assets/stop_sign.jpg; "
            "write path = 'vllm_public_assets/stop_sign.jpg'",
            id="another-file",
        ),
    ],
)
@pytest.mark.parametrize("with_vllm", [False, True], ids=["rule", "vllm-installed"])
def test_manifest_check_refuses_a_path_vllm_never_reads(
    tmp_path: Path, release: Path, path: str, url: str, expected: str, with_vllm: bool
) -> None:
    manifest = tmp_path / "assets.toml"
    manifest.write_text(entry(path, url))
    result = bake("manifest", "check", "--manifest", manifest, env=vllm_env(release) if with_vllm else None)
    assert result.returncode == 2
    assert f"asset 'stop_sign.jpg': path {path!r} {expected}" in result.stderr
    assert result.stderr.count(expected) == 1


@pytest.mark.parametrize(
    ("path", "url", "verdict"),
    [
        pytest.param(
            "vllm_public_assets/stop_sign.jpg",
            IMAGE_URL,
            f"ok  vllm  stop_sign.jpg: matches ImageAsset ({IMAGE_URL})",
            id="matches",
        ),
        pytest.param(
            "vllm_public_assets/stop_sign.jpg",
            f"{VLLM_BUCKET}multimodal_asset/stop_sign.jpg",
            f"MISMATCH  vllm  stop_sign.jpg: vLLM {VLLM_RELEASE} (ImageAsset) downloads stop_sign.jpg from "
            f"{IMAGE_URL}, which the manifest does not list",
            id="wrong-prefix",
        ),
        pytest.param(
            "vllm_public_assets/applause.ogg",
            f"{VLLM_BUCKET}multimodal_asset/applause.ogg",
            f"MISMATCH  vllm  stop_sign.jpg: vLLM {VLLM_RELEASE} would never read applause.ogg as one "
            "asset: its classes ask for AudioAsset <name>.ogg under multimodal_asset/",
            id="unknown-name",
        ),
    ],
)
def test_manifest_check_with_vllm_installed_names_what_vllm_fetches(
    tmp_path: Path, release: Path, path: str, url: str, verdict: str
) -> None:
    manifest = tmp_path / "assets.toml"
    manifest.write_text(entry(path, url))
    result = bake("manifest", "check", "--manifest", manifest, env=vllm_env(release))
    assert result.stdout.startswith(verdict), result.stdout
    assert result.returncode == (0 if verdict.startswith("ok") else 2), result.stderr


def test_manifest_check_without_vllm_has_no_table_to_compare(tmp_path: Path) -> None:
    manifest = tmp_path / "assets.toml"
    manifest.write_text(
        entry("vllm_public_assets/stop_sign.jpg", f"{VLLM_BUCKET}multimodal_asset/stop_sign.jpg")
    )
    result = bake("manifest", "check", "--manifest", manifest)
    assert result.returncode == 0 and result.stdout == ""
    assert "vllm" in result.stderr and "nothing was checked" in result.stderr


# --- `bake doctor`: vLLM's own envs.py where vLLM is installed, the rule otherwise ----------


@pytest.fixture
def baked(tmp_path: Path) -> Path:
    return sealed(FILES, URLS)(tmp_path / "baked")


def serve_at(directory: Path, baked: Path) -> None:
    """What the entrypoint makes there in a job-local location: a link to each baked file."""
    directory.mkdir(parents=True, exist_ok=True)
    for rel in FILES:
        (directory / rel.split("/", 1)[1]).symlink_to(baked / rel)


def doctor(baked: Path, release: Path | None, **env: str) -> subprocess.CompletedProcess[str]:
    extra = vllm_env(release, **env) if release else env
    return bake("doctor", "--assets", baked, env={**extra, "BAKE_ASSETS": str(baked)})


@pytest.mark.parametrize("with_vllm", [False, True], ids=["rule", "vllm-installed"])
def test_doctor_finds_the_served_files(tmp_path: Path, baked: Path, release: Path, with_vllm: bool) -> None:
    xdg = tmp_path / "xdg"
    serve_at(xdg / "vllm/assets/vllm_public_assets", baked)
    result = doctor(baked, release if with_vllm else None, XDG_CACHE_HOME=str(xdg), HOME=str(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    lines = [line for line in result.stdout.splitlines() if line.split("  ")[1:2] == ["vllm"]]
    assert len(lines) == 2 and all(line.startswith("ok  vllm  vllm_public_assets/") for line in lines)
    assert ("checked by its rule" in result.stdout) is not with_vllm


@pytest.mark.parametrize("with_vllm", [False, True], ids=["rule", "vllm-installed"])
def test_doctor_names_the_download_a_missing_file_would_cost(
    tmp_path: Path, baked: Path, release: Path, with_vllm: bool
) -> None:
    result = doctor(baked, release if with_vllm else None, XDG_CACHE_HOME=str(tmp_path / "xdg"))
    assert result.returncode == 3
    where = tmp_path / "xdg/vllm/assets/vllm_public_assets/stop_sign.jpg"
    assert f"WOULD DOWNLOAD  vllm  vllm_public_assets/stop_sign.jpg: looks at {where}, finds nothing" in (
        result.stdout
    )


def test_doctor_with_vllm_installed_looks_where_vllm_really_looks(
    tmp_path: Path, baked: Path, release: Path, site: Path
) -> None:
    """vLLM expands a leading ~ in VLLM_ASSETS_CACHE; the rule (and a shell) does not. Where vLLM
    is installed, doctor runs vLLM's envs.py, and so agrees with vLLM itself."""
    home = tmp_path / "home"
    serve_at(home / "assets" / "vllm_public_assets", baked)
    env = {"VLLM_ASSETS_CACHE": "~/assets", "HOME": str(home)}
    vllm_sees = probe(site, env, tmp_path, *SPECS)
    assert vllm_sees["downloads"] == [] and vllm_sees["results"]["image:stop_sign:jpg"]["link"]

    assert doctor(baked, release, **env).returncode == 0
    by_rule = doctor(baked, None, **env)
    assert by_rule.returncode == 3
    assert f"looks at {REPO}/~/assets/vllm_public_assets/stop_sign.jpg" in by_rule.stdout


def test_doctor_falls_back_to_the_rule_when_vllms_envs_fails(tmp_path: Path, baked: Path) -> None:
    """An installed vLLM whose envs.py cannot run: doctor says so on each line and checks the rule."""
    package = tmp_path / "broken" / "vllm"
    (package / "assets").mkdir(parents=True)
    (package / "envs.py").write_text("raise ImportError('no module named torch')\n")
    (package / "assets" / "base.py").write_text("")
    xdg = tmp_path / "xdg"
    serve_at(xdg / "vllm/assets/vllm_public_assets", baked)
    result = bake(
        "doctor", "--assets", baked,
        env={"PYTHONPATH": f"{package.parent}{os.pathsep}{REPO}", "XDG_CACHE_HOME": str(xdg)},
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    lines = [line for line in result.stdout.splitlines() if "  vllm  " in line]
    assert len(lines) == 2
    assert all("vLLM's own envs.py could not say where it looks" in line for line in lines)
    assert all("ImportError: no module named torch: checked by its rule" in line for line in lines)


def test_doctor_says_vllm_would_read_other_bytes(tmp_path: Path, baked: Path, release: Path) -> None:
    cache = tmp_path / "assets" / "vllm_public_assets"
    serve_at(cache, baked)
    (cache / "stop_sign.jpg").unlink()
    (cache / "stop_sign.jpg").write_bytes(b"an older image")
    result = doctor(baked, release, VLLM_ASSETS_CACHE=str(tmp_path / "assets"))
    assert result.returncode == 3
    assert (
        f"WOULD DOWNLOAD  vllm  vllm_public_assets/stop_sign.jpg: {cache}/stop_sign.jpg has sha256 "
        f"{sha256(b'an older image')}, expected {sha256(IMAGE)}; vLLM checks no hash and would read it"
    ) in result.stdout


# --- `bake harvest`: what a run left in vLLM's cache ----------------------------------------


@pytest.fixture
def job_cache(tmp_path: Path, baked: Path) -> Path:
    """An XDG_CACHE_HOME a run left: an image and an audio file vLLM fetched, a file no class names,
    and a link the entrypoint made into the baked assets."""
    xdg = tmp_path / "job" / "xdg"
    cache = xdg / "vllm" / "assets" / "vllm_public_assets"
    cache.mkdir(parents=True)
    (cache / "cherry_blossom.jpg").write_bytes(b"cherry blossom bytes")
    (cache / "mary_had_lamb.ogg").write_bytes(b"mary had a little lamb")
    (cache / "notes.txt").write_bytes(b"left by something else")
    (cache / "stop_sign.jpg").symlink_to(baked / "vllm_public_assets/stop_sign.jpg")
    return xdg


def test_harvest_with_vllm_installed_pins_by_each_classs_prefix(
    tmp_path: Path, job_cache: Path, baked: Path, release: Path
) -> None:
    manifest = tmp_path / "assets.toml"
    result = bake("harvest", job_cache, "--manifest", manifest, env=vllm_env(release, BAKE_ASSETS=str(baked)))
    assert result.returncode == 0, result.stderr
    assert {(a.name, a.path, a.urls) for a in load_manifest(manifest)} == {
        (
            "cherry_blossom.jpg",
            "vllm_public_assets/cherry_blossom.jpg",
            (f"{VLLM_BUCKET}vision_model_images/cherry_blossom.jpg",),
        ),
        (
            "mary_had_lamb.ogg",
            "vllm_public_assets/mary_had_lamb.ogg",
            (f"{VLLM_BUCKET}multimodal_asset/mary_had_lamb.ogg",),
        ),
    }
    notes = job_cache / "vllm/assets/vllm_public_assets/notes.txt"
    assert f"bake: not pinned: {notes}: vLLM {VLLM_RELEASE}'s asset classes (" in result.stderr
    assert "none asks for it, and no manifest entry lists it; pin it with `bake add URL --path " in (
        result.stderr
    )
    assert "stop_sign.jpg" not in result.stderr  # the entrypoint's link: bake's own, skipped


def test_harvest_without_vllm_pins_what_the_manifest_names(
    tmp_path: Path, job_cache: Path, baked: Path
) -> None:
    manifest = tmp_path / "assets.toml"
    lamb = f"{VLLM_BUCKET}multimodal_asset/mary_had_lamb.ogg"
    manifest.write_text(entry("vllm_public_assets/mary_had_lamb.ogg", lamb, "lamb"))
    result = bake("harvest", job_cache, "--manifest", manifest, env={"BAKE_ASSETS": str(baked)})
    assert result.returncode == 0, result.stderr
    # The manifest's URL names the cached file; its bytes are what the run read, so that entry is
    # reported (another sha256), never re-pinned. The others cannot be named at all.
    cache = job_cache / "vllm/assets/vllm_public_assets"
    for name in ("cherry_blossom.jpg", "notes.txt"):
        assert (
            f"bake: not pinned: {cache / name}: vllm is not installed here, so its asset classes cannot say "
            f"under which bucket prefix (vision_model_images/ or multimodal_asset/) {name} was fetched"
        ) in result.stderr
    assert [a.name for a in load_manifest(manifest)] == ["lamb"]


def test_harvest_diff_counts_a_served_asset_as_baked(tmp_path: Path, baked: Path, release: Path) -> None:
    xdg = tmp_path / "xdg"
    serve_at(xdg / "vllm/assets/vllm_public_assets", baked)
    node = tmp_path / "node" / "vllm_public_assets"  # node storage: verified copies, not links
    node.mkdir(parents=True)
    for rel, data in FILES.items():
        (node / rel.split("/", 1)[1]).write_bytes(data)
    for env in (vllm_env(release, BAKE_ASSETS=str(baked)), {"BAKE_ASSETS": str(baked)}):
        result = bake("harvest", "--diff", baked, xdg, node.parent, env=env)
        assert result.returncode == 0, result.stdout + result.stderr
        assert result.stdout == f"bake: {baked} has everything the caches hold\n"
    (node / "cherry_blossom.jpg").write_bytes(b"cherry blossom bytes")
    lacking = bake(
        "harvest", "--diff", baked, xdg, node.parent, env=vllm_env(release, BAKE_ASSETS=str(baked))
    )
    assert lacking.returncode == 1
    assert "vllm_public_assets/cherry_blossom.jpg" in lacking.stdout and "stop_sign.jpg" not in lacking.stdout


def test_a_parsed_manifest_owns_vllm_paths() -> None:
    assets = parse_manifest(entry("vllm_public_assets/stop_sign.jpg", IMAGE_URL))
    (owner,) = [c for c in assets.consumers() if c.owns("vllm_public_assets/stop_sign.jpg")]
    assert isinstance(owner, consumers.VllmAssets)
