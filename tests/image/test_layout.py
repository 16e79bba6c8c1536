"""What is specific to bake's own image; the plugin (bake.testing) asserts everything else.

The standard assertions (every asset's size, sha256, owner and mode, SHA256SUMS, the alias
links, the digest label, the consumer locations through the ENTRYPOINT, tini and SIGTERM,
no secret in any layer) run here exactly as another team runs them, through
``pytest --pyargs bake.testing``; the tests below add what only this image promises.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import PurePosixPath

import pytest
import testinfra

from bake.asset import Asset
from bake.manifest import manifest_digest

from . import ALIAS_LINKS, ASSET_ROOT, ASSET_SUBDIRS, INDEX_NAMES, MANIFEST, VOCAB_ASSET, required_env

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


@pytest.fixture(scope="module")
def hf_token() -> str:
    """The dummy Hub token that scripts/test.sh passed to the build as the hf_token secret."""
    return required_env("BAKE_TEST_HF_TOKEN")


@pytest.fixture(scope="module")
def plugin_run(
    image: str, hf_token: str, tmp_path_factory: pytest.TempPathFactory
) -> subprocess.CompletedProcess:
    """`pytest --pyargs bake.testing --bake-image IMAGE --bake-secret-pattern TOKEN`, as teams run it."""
    cwd = tmp_path_factory.mktemp("plugin-run")  # no conftest, no pyproject: the plugin alone
    return subprocess.run(
        [sys.executable, "-m", "pytest", "--pyargs", "bake.testing", "--bake-image", image,
         "--bake-secret-pattern", hf_token, "-p", "no:cacheprovider", "-v", "-rs"],
        cwd=cwd, env={k: v for k, v in os.environ.items() if k != "BAKE_IMAGE"},
        capture_output=True, text=True, timeout=540, check=False,
    )  # fmt: skip


def test_plugin_passes_on_the_image(plugin_run: subprocess.CompletedProcess) -> None:
    assert plugin_run.returncode == 0, plugin_run.stdout[-6000:] + plugin_run.stderr[-2000:]


@pytest.mark.parametrize("asset", MANIFEST.assets, ids=by_name)
def test_plugin_checked_the_asset(plugin_run: subprocess.CompletedProcess, asset: Asset) -> None:
    assert f"test_asset[{asset.path}] PASSED" in plugin_run.stdout


@pytest.mark.parametrize(
    "check",
    [
        "test_location_is_served[",
        "test_tini_is_pid_1",
        "test_secret_pattern_is_in_no_layer[pattern-1] PASSED",
    ],
)
def test_plugin_ran_the_check(plugin_run: subprocess.CompletedProcess, check: str) -> None:
    ran = [line for line in plugin_run.stdout.splitlines() if check in line]
    assert ran and all("PASSED" in line for line in ran), plugin_run.stdout[-6000:]


def test_plugin_checks_missing_libraries_lookups_by_the_lock(plugin_run: subprocess.CompletedProcess) -> None:
    # This image has no consumer library installed (tests/image/test_clients.py adds them): doctor checks
    # each lookup against the lock instead, so the check runs and passes; only the Hub's has nothing.
    assert "test_doctor[s3tokenizer] PASSED" in plugin_run.stdout
    assert "bake.testing: not applicable" in plugin_run.stdout
    assert "test_doctor[huggingface_hub]: the image bakes nothing for huggingface_hub" in plugin_run.stdout


def test_build_digest_is_the_test_manifests(expected_digest: str) -> None:
    assert expected_digest == manifest_digest(MANIFEST)


def test_lock_is_the_test_manifest(bake_lock: dict, expected_digest: str) -> None:
    locked = sorted((e["path"], e["size"], e["sha256"]) for e in bake_lock["assets"])
    assert locked == sorted((a.path, a.size, a.sha256) for a in MANIFEST)
    assert bake_lock["manifest_digest"] == expected_digest


@pytest.mark.parametrize("path", INDEX_FILES)
def test_index_file_is_root_owned_0444(host: testinfra.host.Host, path: str) -> None:
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


def test_encoding_link_points_at_the_sha1_named_vocab(host: testinfra.host.Host) -> None:
    link = host.file(ENCODING_LINK)
    assert link.is_symlink
    assert host.check_output(f"readlink {ENCODING_LINK}") == PurePosixPath(VOCAB_ASSET.path).name
    assert host.file(ENCODING_LINK).sha256sum == VOCAB_ASSET.sha256


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


def test_bake_verify_in_the_image(host: testinfra.host.Host) -> None:
    out = host.run(f"bake verify --dest {ASSET_ROOT}")
    assert out.rc == 0, out.stdout + out.stderr


def test_token_is_not_in_the_config(image_config: dict, hf_token: str) -> None:
    assert hf_token not in str(image_config)


def test_docker_exec_sees_no_token_in_the_environment(host: testinfra.host.Host, hf_token: str) -> None:
    assert hf_token not in host.check_output("env")
