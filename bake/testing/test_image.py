"""The standard assertions for an image that carries bake's asset layer.

``pytest --pyargs bake.testing --bake-image IMAGE``, or inside a job whose runner bypasses the
ENTRYPOINT, ``--bake-local`` after the runner's line. The lock and ``bake.serve`` decide what is
checked, so built-in and declared consumers are covered alike; each asset and each consumer
location is its own test, named after it. Without an image (``--bake-local``) the label, the
ENTRYPOINT and the layer scan are reported as not applicable.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict
from pathlib import PurePosixPath
from typing import Any

import pytest

from bake.testing import probes
from bake.testing.image import DIGEST_LABEL, ImageUnderTest, JobResult, parent_dirs
from bake.testing.layers import Scanner, scan_archive
from bake.testing.plugin import DOCTOR_LIBRARIES, System, given, image_only, not_applicable
from bake.testing.serve import Location, Serve

HUB_LIBRARY = "huggingface_hub"
READY = "bake-testing-ready"
TERMINATED = "bake-testing-sigterm"
# The job for the signal check: it says it is ready, then waits; on SIGTERM it says so and exits 42.
SIGNAL_JOB = [
    "sh",
    "-c",
    f'trap "echo {TERMINATED}; exit 42" TERM; echo {READY}; while :; do sleep 1 & wait $!; done',
]


def _fail(message: str) -> None:
    pytest.fail(message, pytrace=False)


@pytest.fixture(scope="module")
def root(bake_system: System) -> str:
    return bake_system.asset_root


def test_asset(request: pytest.FixtureRequest, bake_asset: Any, bake_host: Any, root: str) -> None:
    """The asset is a regular file with the lock's size and sha256, root-owned and read-only."""
    entry = given(request, bake_asset)
    path = f"{root}/{entry['path']}"
    f = bake_host.file(path)
    expected = f"{entry['size']} bytes, sha256 {entry['sha256']}"
    if not f.exists:
        _fail(f"{entry['path']}: missing at {path}; expected {expected}; rebuild the image's asset layer")
    if f.is_symlink or not f.is_file:
        _fail(f"{entry['path']}: {path} is not a regular file; expected {expected}")
    problems = []
    if f.size != entry["size"]:
        problems.append(f"{f.size} bytes, expected {entry['size']}")
    elif f.sha256sum != entry["sha256"]:
        problems.append(f"sha256 {f.sha256sum}, expected {entry['sha256']}")
    if f.user != "root":
        problems.append(f"owned by {f.user}, expected root")
    if f.mode & 0o222:
        problems.append(f"mode {f.mode:04o} is writable, expected read-only 0444")
    if problems:
        _fail(f"{entry['path']} ({path}): " + "; ".join(problems) + "; rebuild the image's asset layer")


def test_asset_directories_are_root_owned_and_read_only(bake_lock: dict, bake_host: Any, root: str) -> None:
    bad = []
    for directory in parent_dirs(root, [e["path"] for e in bake_lock["assets"]]):
        d = bake_host.file(directory)
        if not d.is_directory or d.user != "root" or d.mode & 0o222:
            bad.append(f"{directory} ({'directory' if d.is_directory else 'not a directory'}, "
                       f"owner {d.user}, mode {d.mode:04o})")  # fmt: skip
    assert not bad, "expected root-owned directories, mode 0555: " + ", ".join(bad)


def test_sha256sums_checks(bake_lock: dict, bake_host: Any, root: str) -> None:
    """``cd ROOT && sha256sum -c SHA256SUMS`` passes, and SHA256SUMS lists exactly the lock's assets."""
    sums = bake_host.file(f"{root}/SHA256SUMS")
    if not sums.exists:
        _fail(f"{root}/SHA256SUMS: missing; rebuild the image's asset layer")
    listed = sorted(tuple(line.split("  ", 1)[::-1]) for line in sums.content_string.splitlines())
    locked = sorted((e["path"], e["sha256"]) for e in bake_lock["assets"])
    assert listed == locked, f"{root}/SHA256SUMS disagrees with bake.lock.json: {listed} != {locked}"
    check = bake_host.run(f"cd {root} && sha256sum -c SHA256SUMS")
    failed = [line for line in check.stdout.splitlines() if not line.endswith(": OK")]
    assert check.rc == 0, f"sha256sum -c SHA256SUMS in {root} failed: {failed or check.stderr.strip()}"


def test_alias_links_resolve(bake_host: Any, root: str) -> None:
    """Every link under the asset root (encoding aliases, Hub snapshots) resolves to a baked file."""
    links = bake_host.run(f"find {root} -type l").stdout.split()
    bad = []
    for link in links:
        target = bake_host.file(link).linked_to
        if not target.startswith(f"{root}/") or not bake_host.file(target).is_file:
            bad.append(f"{link} -> {target}")
    assert not bad, "links under the asset root that do not resolve to a baked file: " + ", ".join(bad)


def test_manifest_digest_label(request: pytest.FixtureRequest, bake_lock: dict) -> None:
    """A manifest-digest label, where the image has one, names the digest its bake.lock.json records.

    bake's own images carry none (a label comes from a build variable, the lock from the layer), so
    an absent label is not applicable: an image built with plain `docker buildx bake` passes.
    """
    image_only(request, "labels")
    labels = request.getfixturevalue("bake_image_attrs").get("Config", {}).get("Labels") or {}
    expected = bake_lock["manifest_digest"]
    if DIGEST_LABEL not in labels:
        not_applicable(request, f"no {DIGEST_LABEL} label; bake.lock.json records {expected}")
    assert labels[DIGEST_LABEL] == expected, (
        f"label {DIGEST_LABEL} is {labels[DIGEST_LABEL]!r}, but the asset layer's bake.lock.json records "
        f"{expected}: the label and the asset layer come from different manifests; drop the label, or "
        "set it in the build that makes the layer"
    )


def test_assets_are_signed(request: pytest.FixtureRequest, bake_lock: dict, bake_system: System) -> None:
    """With --bake-verify-key: every asset of the lock is in a unit image signed with the key, whose
    attestation records it as the lock does, and the whole image and its index are signed too (the
    check `bake verify --image` runs; docs/building.md, "Signing")."""
    from bake.errors import BakeError
    from bake.signing import image_repository, verify_lock_with_key

    config = request.config
    key = config.getoption("bake_verify_key", default=None)
    if not key:
        not_applicable(request, "no --bake-verify-key given, so signatures are not checked")
    repository = config.getoption("bake_assets_repository", default=None) or image_repository(bake_system.ref)
    if repository is None:
        _fail(
            f"{bake_system.ref}: no registry host in its name, so no repository to look for its assets' "
            "signatures in; give --bake-assets-repository REPO (the `bake publish --repository`)"
        )
    try:
        verify_lock_with_key(
            bake_lock, repository, key, tlog=not config.getoption("bake_no_tlog", default=False)
        )
    except BakeError as exc:
        _fail(f"{bake_system.ref}: its assets are not proved published signed with {key}: {exc}")


@pytest.fixture(scope="module")
def served(bake_system: System, bake_serve: Serve, bake_lock: dict, root: str) -> tuple:
    """Run the location probe once: through the ENTRYPOINT (BAKE_REQUIRE=1, no network), or with
    --bake-local here, in the environment the runner's line left."""
    config = {
        "root": root,
        "lib": bake_system.lib,
        "locations": [asdict(loc) for loc in bake_serve.locations],
        "files": [asdict(f) for f in bake_serve.files],
        "links": [asdict(k) for k in bake_serve.links],
    }
    job = bake_system.run(
        "python3", "-c", probes.LOCATIONS, json.dumps(config), environment={"BAKE_REQUIRE": "1"}
    )
    return job, config


def test_location_is_served(request: pytest.FixtureRequest, bake_location: Any, served: tuple) -> None:
    """Through the ENTRYPOINT, offline, the location holds every file bake.serve assigns to it."""
    loc: Location = given(request, bake_location)
    job, _ = served
    where = f"{loc.consumer} at {loc.describe()}"
    if job.exit_code != 0:
        _fail(f"{where}: the job through the ENTRYPOINT failed, {job.describe()}")
    report = json.loads(job.stdout.strip().splitlines()[-1])[loc.id]
    if report["dir"] is None:
        _fail(
            f"{where}: ${loc.var} is unset in the job; the entrypoint must export it (a runner that bypasses "
            'the ENTRYPOINT: run bake_env=$(bake-entrypoint --print-env) || exit; eval "$bake_env" first)'
        )
    entries = {**report["files"], **report["links"]}
    bad = [f"{name}: {problem}" for name, problem in entries.items() if problem]
    if not report["files"]:
        _fail(f"{where}: bake.serve assigns it no file")
    if bad:
        _fail(f"{where} ({report['dir']}): " + "; ".join(bad))


@pytest.fixture(scope="module")
def installed(bake_run: Callable[..., JobResult]) -> dict:
    """The consumer libraries installed in the image: {distribution: version or None}."""
    names = json.dumps([*DOCTOR_LIBRARIES, HUB_LIBRARY])
    job = bake_run("python3", "-c", probes.INSTALLED, names)
    if job.exit_code != 0:
        _fail(f"could not ask the image's python3 which libraries it has: {job.describe()}")
    return json.loads(job.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def doctor(bake_run: Callable[..., JobResult]) -> JobResult:
    return bake_run("bake", "doctor")


def test_doctor(
    request: pytest.FixtureRequest, bake_doctor_library: str, installed: dict, doctor: JobResult
) -> None:
    """`bake doctor` inside a job passes for the library (when the image has it) or declared consumer."""
    name = given(request, bake_doctor_library)
    what = f"{name} {installed.get(name) or ''}".strip()
    # `bake doctor` prints "VERDICT  CONSUMER  ASSET: DETAIL", fields apart by two spaces.
    lines = [line for line in doctor.stdout.splitlines() if line.split("  ")[1:2] == [name]]
    # Doctor checks a missing library's lookups against the lock; if it printed nothing, nothing applied.
    if name in DOCTOR_LIBRARIES and installed.get(name) is None and not lines:
        not_applicable(request, f"{name} is not installed in the image")
    bad = [line for line in lines if not line.startswith("ok  ")]
    if bad or not lines:
        _fail(f"bake doctor for {what}: " + ("; ".join(bad) or "reported nothing") + f"\n{doctor.describe()}")


def test_tini_is_pid_1_and_sigterm_reaches_the_job(request: pytest.FixtureRequest) -> None:
    image_only(request, "entrypoint")
    image: ImageUnderTest = request.getfixturevalue("bake_image_under_test")
    job, init = image.sigterm(SIGNAL_JOB, READY)
    program = PurePosixPath(init.split()[0]).name if init else "(no process)"
    assert program.startswith("tini"), (
        f"PID 1 is {init or 'gone'!r}, expected tini: the ENTRYPOINT must be "
        f'["tini", "--", "bake-entrypoint"] ({job.describe()})'
    )
    assert job.exit_code == 42 and TERMINATED in job.stdout, (
        f"SIGTERM did not reach the job: {job.describe()}"
    )


def test_hub_repository_resolves_offline(
    request: pytest.FixtureRequest, bake_hub_repo: Any, installed: dict, bake_run: Callable[..., JobResult]
) -> None:
    repo = given(request, bake_hub_repo)
    if installed.get(HUB_LIBRARY) is None:
        not_applicable(request, f"{HUB_LIBRARY} is not installed in the image")
    job = bake_run("python3", "-c", probes.HUB, json.dumps(repo), environment={"HF_HUB_OFFLINE": "1"})
    name = f"{repo['repo_type']} {repo['repo_id']}@{repo['revision']}"
    if job.exit_code != 0:
        _fail(f"{name}: the job through the ENTRYPOINT failed, {job.describe()}")
    report = json.loads(job.stdout.strip().splitlines()[-1])
    assert "error" not in report, f"{name}: huggingface_hub offline: {report.get('error')}"
    assert not report["missing"], f"{name}: missing from the snapshot {report['path']}: {report['missing']}"


@pytest.fixture(scope="module")
def secret_findings(pytestconfig: pytest.Config, bake_image_under_test: ImageUnderTest) -> tuple:
    patterns = [p.encode() for p in pytestconfig.getoption("bake_secret_pattern")]
    return scan_archive(bake_image_under_test.save(), patterns), Scanner(patterns)


def test_secret_pattern_is_in_no_layer(request: pytest.FixtureRequest, bake_secret_pattern: Any) -> None:
    """The pattern occurs in no layer (contents, names, link targets), config or history entry."""
    index = given(request, bake_secret_pattern)
    image_only(request, "layers")
    findings, scanner = request.getfixturevalue("secret_findings")
    where = [scanner.redact(f.where) for f in findings if f.pattern == index]
    if where:
        _fail(f"--bake-secret-pattern #{index + 1} found in: " + "; ".join(where))
