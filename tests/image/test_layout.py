"""The built image's files, index, labels, entrypoint and secrets, as the contract lays them out."""

from __future__ import annotations

import json
from pathlib import Path, PurePosixPath

import pytest
import testinfra

from bake.manifest import Asset, manifest_digest

from . import (
    ALIAS_LINKS,
    ASSET_ROOT,
    ASSET_SUBDIRS,
    INDEX_NAMES,
    MANIFEST,
    S3_ASSET,
    VOCAB_ASSET,
    docker,
    required_env,
)

pytestmark = pytest.mark.docker

ASSET_DIRS = sorted([ASSET_ROOT, *(f"{ASSET_ROOT}/{d}" for d in ASSET_SUBDIRS)])
INDEX_FILES = [f"{ASSET_ROOT}/{name}" for name in INDEX_NAMES]
ENCODING_LINK = f"{ASSET_ROOT}/tiktoken/o200k_base.tiktoken"
OCI_LABELS = [
    "org.opencontainers.image.title",
    "org.opencontainers.image.description",
    "org.opencontainers.image.version",
    "org.opencontainers.image.base.name",
]


def by_name(asset: Asset) -> str:
    return asset.name


@pytest.fixture(scope="module")
def expected_digest() -> str:
    """The manifest digest the build was given (ASSET_DIGEST, from `bake manifest digest`)."""
    return required_env("ASSET_DIGEST")


def test_build_digest_is_the_test_manifests(expected_digest: str) -> None:
    assert expected_digest == manifest_digest(MANIFEST)


@pytest.mark.parametrize("asset", MANIFEST, ids=by_name)
def test_asset_is_a_regular_file(host: testinfra.host.Host, asset: Asset) -> None:
    f = host.file(f"{ASSET_ROOT}/{asset.path}")
    assert f.is_file and not f.is_symlink


@pytest.mark.parametrize("asset", MANIFEST, ids=by_name)
def test_asset_size(host: testinfra.host.Host, asset: Asset) -> None:
    assert host.file(f"{ASSET_ROOT}/{asset.path}").size == asset.size


@pytest.mark.parametrize("asset", MANIFEST, ids=by_name)
def test_asset_sha256(host: testinfra.host.Host, asset: Asset) -> None:
    assert host.file(f"{ASSET_ROOT}/{asset.path}").sha256sum == asset.sha256


@pytest.mark.parametrize("path", [f"{ASSET_ROOT}/{a.path}" for a in MANIFEST] + INDEX_FILES)
def test_file_is_root_owned_0444(host: testinfra.host.Host, path: str) -> None:
    f = host.file(path)
    assert (f.user, f.group, f.mode) == ("root", "root", 0o444)


@pytest.mark.parametrize("path", ASSET_DIRS)
def test_directory_is_root_owned_0555(host: testinfra.host.Host, path: str) -> None:
    d = host.file(path)
    assert d.is_directory
    assert (d.user, d.group, d.mode) == ("root", "root", 0o555)


def test_asset_root_holds_exactly_the_assets_index_and_link(host: testinfra.host.Host) -> None:
    found = set(host.check_output(f"find {ASSET_ROOT} -mindepth 1").splitlines())
    expected = {f"{ASSET_ROOT}/{a.path}" for a in MANIFEST} | set(INDEX_FILES)
    expected |= {f"{ASSET_ROOT}/{link}" for link in ALIAS_LINKS}
    assert found == expected | (set(ASSET_DIRS) - {ASSET_ROOT})


def test_no_temporary_or_partial_files_under_opt_bake(host: testinfra.host.Host) -> None:
    patterns = ["*.incomplete", "*.bake-tmp", "*.part", "*.partial", "*.tmp", "*~", ".*", "*.lock"]
    expr = " -o ".join(f"-name '{p}'" for p in patterns)
    assert host.check_output(f"find /opt/bake \\( {expr} \\) -print") == ""


def test_sha256sums_checks(host: testinfra.host.Host) -> None:
    out = host.run(f"cd {ASSET_ROOT} && sha256sum -c SHA256SUMS")
    assert out.rc == 0, out.stdout + out.stderr
    assert sorted(out.stdout.splitlines()) == sorted(f"{a.path}: OK" for a in MANIFEST)


def test_sha256sums_lists_relative_paths(host: testinfra.host.Host) -> None:
    lines = host.file(f"{ASSET_ROOT}/SHA256SUMS").content_string.splitlines()
    assert sorted(lines) == sorted(f"{a.sha256}  {a.path}" for a in MANIFEST)


def test_encoding_link_points_at_the_sha1_named_vocab(host: testinfra.host.Host) -> None:
    link = host.file(ENCODING_LINK)
    assert link.is_symlink
    assert host.check_output(f"readlink {ENCODING_LINK}") == PurePosixPath(VOCAB_ASSET.path).name
    assert host.file(ENCODING_LINK).sha256sum == VOCAB_ASSET.sha256


@pytest.fixture(scope="module")
def lock(host: testinfra.host.Host) -> dict:
    return json.loads(host.file(f"{ASSET_ROOT}/bake.lock.json").content_string)


def test_lock_manifest_digest(lock: dict, expected_digest: str) -> None:
    assert lock["manifest_digest"] == expected_digest


def test_lock_lists_exactly_the_manifest_paths(lock: dict) -> None:
    assert sorted(e["path"] for e in lock["assets"]) == sorted(a.path for a in MANIFEST)


@pytest.mark.parametrize("asset", MANIFEST, ids=by_name)
def test_lock_entry(lock: dict, asset: Asset) -> None:
    (entry,) = [e for e in lock["assets"] if e["path"] == asset.path]
    assert (entry["size"], entry["sha256"]) == (asset.size, asset.sha256)


def test_manifest_digest_label(image_config: dict, expected_digest: str) -> None:
    assert image_config["Config"]["Labels"]["dev.bake.assets.manifest-digest"] == expected_digest


def test_asset_root_label(image_config: dict) -> None:
    assert image_config["Config"]["Labels"]["dev.bake.assets.root"] == ASSET_ROOT


@pytest.mark.parametrize("label", OCI_LABELS)
def test_oci_label(image_config: dict, label: str) -> None:
    assert image_config["Config"]["Labels"].get(label)


@pytest.mark.parametrize("command", ["tini", "bake-entrypoint", "bake"])
def test_command_on_path_is_executable(host: testinfra.host.Host, command: str) -> None:
    path = host.check_output(f"command -v {command}")
    f = host.file(path)
    assert f.is_file and f.mode & 0o111 == 0o111 and f.user == "root"


def test_entrypoint_is_tini_then_bake_entrypoint(image_config: dict) -> None:
    assert image_config["Config"]["Entrypoint"] == ["tini", "--", "bake-entrypoint"]


def test_tini_runs_as_pid_1(host: testinfra.host.Host) -> None:
    assert Path(host.check_output("readlink /proc/1/exe")).name.startswith("tini")


def test_bake_verify_in_the_image(host: testinfra.host.Host) -> None:
    out = host.run(f"bake verify --dest {ASSET_ROOT}")
    assert out.rc == 0, out.stdout + out.stderr


@pytest.fixture(scope="module")
def hf_token() -> str:
    """The dummy Hub token that scripts/test.sh passed to the build as the hf_token secret."""
    return required_env("BAKE_TEST_HF_TOKEN")


def scan(archive: Path, needle: bytes) -> bool:
    """Whether ``needle`` occurs anywhere in ``archive``: every layer tar, config and manifest."""
    overlap = b""
    with archive.open("rb") as fh:
        while chunk := fh.read(1 << 22):
            if needle in overlap + chunk:
                return True
            overlap = chunk[-(len(needle) - 1) :]
    return False


def test_saved_image_scan_finds_what_only_a_layer_holds(image_archive: Path) -> None:
    # The control: a SHA256SUMS line exists in the asset layer alone, not in any config or label.
    assert scan(image_archive, f"{S3_ASSET.sha256}  {S3_ASSET.path}".encode())


def test_token_is_in_no_layer(image_archive: Path, hf_token: str) -> None:
    assert not scan(image_archive, hf_token.encode())


def test_token_is_not_in_history(image: str, hf_token: str) -> None:
    history = docker("history", "--no-trunc", "--format", "{{json .}}", image).stdout
    assert "bake-entrypoint" in history  # the control: this is the image's real history
    assert hf_token not in history


def test_token_is_not_in_the_lock(host: testinfra.host.Host, hf_token: str) -> None:
    assert hf_token not in host.file(f"{ASSET_ROOT}/bake.lock.json").content_string


def test_token_is_not_in_the_config(image_config: dict, hf_token: str) -> None:
    assert hf_token not in json.dumps(image_config)


def test_docker_exec_sees_no_token_in_the_environment(host: testinfra.host.Host, hf_token: str) -> None:
    assert hf_token not in host.check_output("env")
