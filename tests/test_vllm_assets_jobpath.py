"""vLLM's public test assets on vLLM's job paths, on the host under dash and busybox sh: the
entrypoint (the docker path, its directories absent), the runner line (the native path), and node
storage whose locks fail. After each, vLLM 0.34.0's own ``get_vllm_public_assets``
(tests.vllm_site) must find every baked file with no download attempted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import nolock
from tests.assets import sha256
from tests.pod import RUNNER as POD_RUNNER
from tests.pod import install_entrypoint
from tests.serve import Box, Shell, job_env, ready_lines, sealed, shell_and_box, snapshot
from tests.test_entrypoint import mount, needs_root
from tests.vllm_site import FILES, SPECS, URLS, make_site, probe

pytestmark = pytest.mark.timeout(180)

JOB_ID = "0190a1b2-c3d4-4e5f-8a9b-0c1d2e3f4a5b"  # a Buildkite job id
SERVED = "vllm/assets/vllm_public_assets"  # below XDG_CACHE_HOME, when VLLM_ASSETS_CACHE is unset


shell, box = shell_and_box(sealed(FILES, URLS), "mnt")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_site(tmp_path_factory.mktemp("vllm-site"))


@pytest.fixture(scope="module")
def shim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return nolock.build(tmp_path_factory.mktemp("nolock"))


def assert_vllm_finds(report: dict, where: Path, *, linked: bool) -> None:
    """vLLM's own code found each baked file at ``where`` (a link into the image, or a copy)."""
    assert report["downloads"] == [], report
    for spec, name in SPECS.items():
        found = report["results"][spec]
        assert Path(report["cwd"], found["path"]) == where / name, found
        assert found["sha256"] == sha256(FILES[f"vllm_public_assets/{name}"]), found
        assert found["link"] is linked, found


def test_docker_path_serves_vllms_assets_with_the_job_directories_absent(box: Box, site: Path) -> None:
    """vLLM's docker path: the image's ENTRYPOINT runs first, with the runner's -e block; the
    job's directories do not exist yet (its preflight makes them after)."""
    xdg = box.root / "tmp" / f"vllm-buildkite-{JOB_ID}" / "cache" / "xdg"
    tmpdir = box.root / "tmp" / f"vllm-{JOB_ID[:8]}" / "tmp"
    result = box.run("env", BAKE_REQUIRE=1, XDG_CACHE_HOME=xdg, TMPDIR=tmpdir, HF_HOME=box.root / "hf")

    env = job_env(result)
    assert env["XDG_CACHE_HOME"] == str(xdg) and "VLLM_ASSETS_CACHE" not in env  # nothing re-pointed
    assert_vllm_finds(probe(site, env, box.root, *SPECS), xdg / SERVED, linked=True)
    assert (
        "vllm_public_assets/stop_sign.jpg, vllm_public_assets/winning_call.ogg"
        in ready_lines(result.stderr)[0]
    )


def test_native_path_serves_vllms_assets_after_the_runner_line(shell: Shell, box: Box, site: Path) -> None:
    """A native pod: the runner exports a per-job XDG_CACHE_HOME, runs bake's line, then the job."""
    bin_dir = install_entrypoint(box.root / "pod-bin", shell)
    job_dir = box.root / "job-1"
    env = {
        "PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin", "HOME": str(box.home),
        "BAKE_ASSETS": str(box.assets), "BAKE_REQUIRE": "1", "PYTHONPATH": str(site),
    }  # fmt: skip
    pod = subprocess.run(
        [*shell.argv, str(POD_RUNNER), str(job_dir), sys.executable, str(site / "vllm_probe.py"), *SPECS],
        env=env, cwd=box.root, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert pod.returncode == 0, pod.stderr
    assert_vllm_finds(json.loads(pod.stdout), job_dir / "cache" / SERVED, linked=True)


@pytest.mark.parametrize("variable", ["VLLM_ASSETS_CACHE", "XDG_CACHE_HOME"])
def test_on_a_lockless_volume_vllms_assets_are_seeded_and_nothing_is_re_pointed(
    box: Box, shim: Path, site: Path, variable: str
) -> None:
    """The runner points vLLM's cache at node storage (a volume that already holds data) whose locks
    fail: verified copies are seeded beside what is there, and the variable keeps its value."""
    volume = box.root / "volume"
    cache = volume / "assets" if variable == "VLLM_ASSETS_CACHE" else volume / "xdg"
    served = cache / ("vllm_public_assets" if variable == "VLLM_ASSETS_CACHE" else SERVED)
    served.mkdir(parents=True)
    (served / "cherry_blossom.jpg").write_bytes(b"an earlier job's image")
    (cache / "model_streamer").mkdir()  # vLLM's other use of VLLM_ASSETS_CACHE
    before = snapshot(volume)

    result = box.run("env", BAKE_REQUIRE=1, **{variable: cache}, **nolock.environment(shim, volume))

    env = job_env(result)
    assert env[variable] == str(cache) and ("VLLM_ASSETS_CACHE" in env) is (variable == "VLLM_ASSETS_CACHE")
    assert_vllm_finds(probe(site, env, box.root, *SPECS), served, linked=False)
    assert_seeded_only(before, snapshot(volume))
    assert f"flock on {served}/.bake/lock failed: No locks available" in ready_lines(result.stderr)[0]


@needs_root
def test_an_empty_cache_on_a_mount_gains_copies_never_links(box: Box, site: Path) -> None:
    cache = mount(box, "ext4") / "vllm-assets"
    result = box.run("env", BAKE_REQUIRE=1, VLLM_ASSETS_CACHE=cache)
    assert_vllm_finds(
        probe(site, job_env(result), box.root, *SPECS), cache / "vllm_public_assets", linked=False
    )


def test_a_cache_holding_other_bytes_under_a_baked_name_is_re_pointed_keeping_what_it_held(
    box: Box, site: Path
) -> None:
    """vLLM checks no hash, so a baked name holding other bytes must not reach the job: the job gets
    VLLM_ASSETS_CACHE re-pointed to a job-local view that still shows every other entry of the
    directory it named, and the node's files are left as they are."""
    cache = box.root / "shared" / "assets"
    (cache / "vllm_public_assets").mkdir(parents=True)
    (cache / "vllm_public_assets" / "stop_sign.jpg").write_bytes(b"an older image")
    (cache / "model_streamer").mkdir()  # vLLM's other use of VLLM_ASSETS_CACHE
    before = snapshot(cache)

    result = box.run("env", BAKE_REQUIRE=1, VLLM_ASSETS_CACHE=cache)

    view = Path(job_env(result)["VLLM_ASSETS_CACHE"])
    assert view.parent == box.tmp
    assert (view / "model_streamer").samefile(cache / "model_streamer")
    report = probe(site, job_env(result), box.root, *SPECS)
    assert_vllm_finds(report, view / "vllm_public_assets", linked=True)
    assert_seeded_only(before, snapshot(cache))


def assert_seeded_only(before: dict, after: dict) -> None:
    """Node storage lost and changed nothing; it gained only bake's state and verified copies."""
    for rel, entry in before.items():  # a directory's mtime moves when it gains an entry
        assert (after[rel] == entry) if entry[0] != "dir" else (after[rel][:2] == entry[:2]), rel
    for rel, entry in after.items():
        if rel not in before:
            name = rel.rsplit("/", 1)[-1]
            copy = f"vllm_public_assets/{name}" in FILES and entry[3] == FILES[f"vllm_public_assets/{name}"]
            assert "/.bake" in f"/{rel}" or (entry[0] == "file" and copy), rel


def test_a_file_where_vllms_directory_belongs_stops_the_job_under_bake_require(box: Box) -> None:
    cache = box.root / "assets-cache"
    cache.mkdir()
    (cache / "vllm_public_assets").write_bytes(b"not a directory")

    result = box.run("env", BAKE_REQUIRE=1, VLLM_ASSETS_CACHE=cache)

    assert result.returncode == 6, result.stderr
    assert f"{cache}/vllm_public_assets" in result.stderr
    assert (cache / "vllm_public_assets").read_bytes() == b"not a directory"
    assert os.path.isfile(cache / "vllm_public_assets")
