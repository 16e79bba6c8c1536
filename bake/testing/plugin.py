"""The pytest plugin: ``--bake-image`` or ``--bake-local``, ``--bake-secret-pattern``, fixtures, parameters.

Registered through the ``pytest11`` entry point, so it loads in every pytest run of an
environment where bake is installed. It therefore imports nothing beyond pytest and bake's
own light modules at import time, adds options and fixtures only, and raises its usage error
only when tests that need an image are selected.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from bake.consumers import BUILTINS, SERVE_NAME
from bake.index import LOCK_NAME
from bake.testing.image import EXTRA, ImageError, ImageUnderTest, JobResult
from bake.testing.local import RunningSystem
from bake.testing.serve import Serve, ServeError, legacy_serve, parse_serve

STANDARD_MODULE = "bake.testing.test_image"
# The consumer libraries `bake doctor` knows, by distribution name, as its report names them.
# From the consumer table, so a new built-in is checked without touching the plugin.
DOCTOR_LIBRARIES = tuple(lib for c in BUILTINS for lib in c.libraries)
# Consumers whose doctor checks need their library (the Hub has its own test).
BUILT_IN_CONSUMERS = {c.name for c in BUILTINS} | {"hub"}
USAGE = (
    "bake.testing: no image to check. Name one with --bake-image IMAGE or BAKE_IMAGE=IMAGE, "
    "e.g. `pytest --pyargs bake.testing --bake-image registry.example/team/image:tag`; "
    "inside a job whose runner bypasses the ENTRYPOINT (a native pod), check the running system "
    "with --bake-local (or BAKE_LOCAL=1) after the runner's line"
)
# What --bake-local cannot check, by check: there is no image, only the system it runs on.
NO_IMAGE = {
    "labels": "no image labels in --bake-local mode (the running system has none); "
    "check the image with --bake-image",
    "entrypoint": "the runner bypasses the ENTRYPOINT in --bake-local mode, so tini is not PID 1 "
    "by design; check the image's ENTRYPOINT with --bake-image",
    "layers": "no image layers in --bake-local mode; scan them with --bake-image IMAGE "
    "--bake-secret-pattern P where the engine is",
}
# What is checked: an image, or with --bake-local the system pytest runs on.
System = ImageUnderTest | RunningSystem
_FACTS = pytest.StashKey["Facts"]()
_NOT_APPLICABLE = pytest.StashKey[list]()


@dataclass(frozen=True)
class NotApplicable:
    """A parameter standing for "nothing of this kind here"; the test reports it as not applicable."""

    reason: str


@dataclass(frozen=True)
class Broken:
    """A parameter standing for what the image should have and lacks (its lock): the test fails with it."""

    reason: str


@dataclass(frozen=True)
class NoImage:
    """The parameter used when no image was given: selecting such a test is a usage error."""


@dataclass
class Facts:
    """What collection needs to know about the image: its lock and its consumer locations."""

    ref: str | None
    error: str | None = None
    root: str = ""
    lock: dict | None = None
    problem: str | None = None
    serve: Serve = field(default_factory=Serve)
    serve_source: str = SERVE_NAME
    serve_problem: str | None = None
    patterns: list[str] = field(default_factory=list)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("bake", "image assertions for images that carry bake's asset layer")
    group.addoption("--bake-image", default=None, metavar="IMAGE", help="the image to check (or BAKE_IMAGE)")
    group.addoption(
        "--bake-local",
        action="store_true",
        default=False,
        help="check the running system instead of an image, after the runner's line (or BAKE_LOCAL=1)",
    )
    group.addoption(
        "--bake-secret-pattern",
        action="append",
        default=[],
        metavar="P",
        help="fail if P occurs in any layer or history entry (repeatable)",
    )
    group.addoption(
        "--bake-verify-key",
        default=None,
        metavar="KEY",
        help="also prove the assets published signed with KEY (cosign: a public key file or a KMS URI)",
    )
    group.addoption(
        "--bake-assets-repository",
        default=None,
        metavar="REPO",
        help="with --bake-verify-key: where the assets were published (default: the image's repository)",
    )
    group.addoption(
        "--bake-no-tlog",
        action="store_true",
        default=False,
        help="with --bake-verify-key: verify without the transparency log",
    )


def pytest_configure(config: pytest.Config) -> None:
    if "" in (config.getoption("bake_secret_pattern", default=None) or []):
        # An empty pattern would match everything: an unset secret variable, most likely.
        raise pytest.UsageError("bake.testing: --bake-secret-pattern is empty; pass the secret's value")
    if local_mode(config) and config.getoption("bake_image", default=None):
        raise pytest.UsageError(
            "bake.testing: --bake-image and --bake-local both given; "
            "check an image (--bake-image) or the running system (--bake-local), one per run"
        )


def local_mode(config: pytest.Config) -> bool:
    """Whether --bake-local or BAKE_LOCAL=1 asks for the running system instead of an image."""
    flag = os.environ.get("BAKE_LOCAL", "").strip().lower() in ("1", "true", "yes", "on")
    return bool(config.getoption("bake_local", default=False)) or flag


def image_ref(config: pytest.Config) -> str | None:
    """Return the image named by --bake-image or BAKE_IMAGE, or None (always None with --bake-local)."""
    if local_mode(config):
        return None
    return config.getoption("bake_image", default=None) or os.environ.get("BAKE_IMAGE") or None


def subject(config: pytest.Config) -> str | None:
    """Return what is checked, for messages: the image's reference, the running system, or None."""
    return RunningSystem().ref if local_mode(config) else image_ref(config)


def _read_lock(image: System, facts: Facts) -> None:
    path = f"{facts.root}/{LOCK_NAME}"
    data = image.read_file(path)
    if data is None:
        facts.problem = (
            f"{path}: missing; this image carries no bake asset layer: publish one (`bake publish`), then "
            "add `COPY --link --from=<the pinned assets image> / /` to its Dockerfile (`bake pin`)"
            + (
                "; with --bake-local, BAKE_ASSETS names the asset root"
                if isinstance(image, RunningSystem)
                else ""
            )
        )
        return
    try:
        lock = json.loads(data)
        if not all(
            isinstance(e["path"], str) and int(e["size"]) >= 0 and e["sha256"] for e in lock["assets"]
        ):
            raise ValueError("an asset entry lacks its path, size or sha256")
    except (ValueError, KeyError, TypeError) as exc:
        facts.problem = (
            f"{path}: not a bake lock ({type(exc).__name__}: {exc}); rebuild the asset layer with bake"
        )
        return
    facts.lock = lock


def _read_serve(image: System, facts: Facts) -> None:
    path = f"{facts.root}/{SERVE_NAME}"
    data = image.read_file(path)
    if data is None:
        facts.serve_source = "the built-in consumers (the image predates bake.serve)"
        facts.serve = legacy_serve(facts.lock["assets"] if facts.lock else [])
        return
    try:
        facts.serve = parse_serve(data.decode("utf-8"), path)
    except UnicodeDecodeError as exc:
        facts.serve_problem = f"{path}: not UTF-8 text ({exc}); rebuild the asset layer with bake"
    except ServeError as exc:
        facts.serve_problem = str(exc)


def facts_of(config: pytest.Config) -> Facts:
    """Read, once per session, what collection needs from the image named on the command line."""
    if _FACTS in config.stash:
        return config.stash[_FACTS]
    facts = Facts(subject(config), patterns=list(config.getoption("bake_secret_pattern", default=[]) or []))
    if facts.ref is not None:
        try:
            image = RunningSystem() if local_mode(config) else ImageUnderTest(facts.ref)
            facts.root = image.asset_root
            _read_lock(image, facts)
            _read_serve(image, facts)
        except ImageError as exc:
            facts.error = str(exc)
    config.stash[_FACTS] = facts
    return facts


def _hub_repos(serve: Serve) -> list[dict]:
    """Return each baked Hub repository (type, id, commit, files) from the snapshot links bake.serve lists."""
    repos: dict[tuple, dict] = {}
    for link in serve.links:
        parts = link.name.split("/")
        if len(parts) < 4 or parts[1] != "snapshots" or "--" not in parts[0]:
            continue
        kind, *name = parts[0].split("--")
        key = (parts[0], parts[2])
        repo = repos.setdefault(
            key,
            {"repo_type": kind.rstrip("s"), "repo_id": "/".join(name), "revision": parts[2], "files": []},
        )
        repo["files"].append("/".join(parts[3:]))
    return list(repos.values())


def _params(name: str, facts: Facts) -> list[tuple[Any, str]]:
    """Return (value, id) pairs for one of the parametrised fixture names."""
    if name == "bake_secret_pattern":
        if not facts.patterns:
            return [(NotApplicable("no --bake-secret-pattern given"), "no-pattern")]
        return [(index, f"pattern-{index + 1}") for index in range(len(facts.patterns))]
    if facts.ref is None:
        return [(NoImage(), "no-image")]
    if facts.error is not None or facts.problem is not None or facts.lock is None:
        return [(Broken(facts.error or facts.problem or f"no {LOCK_NAME}"), LOCK_NAME)]
    if name == "bake_asset":
        return [(entry, entry["path"]) for entry in facts.lock["assets"]] or [
            (NotApplicable(f"{LOCK_NAME} lists no asset"), "no-asset")
        ]
    if name == "bake_doctor_library":
        # Declared consumers name no library: doctor always checks their locations. A built-in
        # one whose image bakes nothing for it has nothing for doctor to check (huggingface_hub
        # installed, no Hub repository baked).
        served = {loc.consumer for loc in facts.serve.served()}
        declared = sorted(served - BUILT_IN_CONSUMERS)
        built_in = [
            (lib if c.name in served else NotApplicable(f"the image bakes nothing for {lib} ({c.name})"), lib)
            for c in BUILTINS
            for lib in c.libraries
        ]
        return built_in + [(c, f"{c}-declared") for c in declared]
    if facts.serve_problem is not None:
        return [(Broken(facts.serve_problem), SERVE_NAME)]
    if name == "bake_location":
        return [(loc, f"{loc.id}:{loc.describe()}") for loc in facts.serve.served()] or [
            (NotApplicable(f"{facts.serve_source} names no consumer location"), "no-location")
        ]
    repos = _hub_repos(facts.serve)
    return [(r, f"{r['repo_type']}:{r['repo_id']}@{r['revision'][:12]}") for r in repos] or [
        (NotApplicable("the image bakes no Hub repository"), "no-hub-repository")
    ]


PARAMETRISED = ("bake_asset", "bake_location", "bake_doctor_library", "bake_hub_repo", "bake_secret_pattern")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    for name in PARAMETRISED:
        if name in metafunc.fixturenames:
            values, ids = zip(*_params(name, facts_of(metafunc.config)), strict=True)
            metafunc.parametrize(name, values, ids=ids, scope="function")


def _needs_image(item: pytest.Item) -> bool:
    module = getattr(item, "module", None)
    if module is not None and module.__name__ == STANDARD_MODULE:
        return True
    callspec = getattr(item, "callspec", None)
    return callspec is not None and any(isinstance(v, NoImage) for v in callspec.params.values())


def pytest_collection_finish(session: pytest.Session) -> None:
    if not any(_needs_image(item) for item in session.items):
        return
    facts = facts_of(session.config)
    if facts.ref is None:
        raise pytest.UsageError(USAGE)
    if facts.error is not None:
        raise pytest.UsageError(f"bake.testing: {facts.error}")


def given(request: pytest.FixtureRequest, value: Any) -> Any:
    """Return a parametrised value; fail for a Broken one, report a NotApplicable one (see not_applicable)."""
    if isinstance(value, Broken):
        pytest.fail(f"{subject(request.config)}: {value.reason}", pytrace=False)
    if isinstance(value, NotApplicable):
        not_applicable(request, value.reason)
    return value


def not_applicable(request: pytest.FixtureRequest, reason: str) -> None:
    """Report the check as not applicable: listed in the summary, and shown as a skip with its reason."""
    request.config.stash.setdefault(_NOT_APPLICABLE, []).append(f"{request.node.nodeid}: {reason}")
    pytest.skip(f"not applicable: {reason}")


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    lines = config.stash.get(_NOT_APPLICABLE, [])
    if lines:
        terminalreporter.section("bake.testing: not applicable")
        for line in lines:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def bake_image(pytestconfig: pytest.Config) -> str:
    """The reference of the image under test (--bake-image or BAKE_IMAGE)."""
    ref = image_ref(pytestconfig)
    if ref is None:
        pytest.fail(USAGE, pytrace=False)
    return ref


@pytest.fixture(scope="session")
def bake_image_under_test(bake_image: str) -> ImageUnderTest:
    """The image, opened through the docker SDK (``.attrs``, ``.asset_root``, ``.read_file``, ``.run``)."""
    try:
        return ImageUnderTest(bake_image)
    except ImageError as exc:
        pytest.fail(f"bake.testing: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def bake_system(pytestconfig: pytest.Config, request: pytest.FixtureRequest) -> System:
    """What is checked: the image under test, or with --bake-local the running system.

    Both have ``.ref``, ``.asset_root``, ``.lib``, ``.read_file`` and ``.run``; an image's ``run``
    goes through its ENTRYPOINT, the running system's runs here, in this environment.
    """
    if local_mode(pytestconfig):
        return RunningSystem()
    return request.getfixturevalue("bake_image_under_test")


def image_only(request: pytest.FixtureRequest, check: str) -> None:
    """Report ``check`` (a key of NO_IMAGE) as not applicable in --bake-local mode; else return."""
    if local_mode(request.config):
        not_applicable(request, NO_IMAGE[check])


@pytest.fixture(scope="session")
def bake_image_attrs(bake_image_under_test: ImageUnderTest) -> dict:
    """``docker image inspect`` of the image under test."""
    return bake_image_under_test.attrs


@pytest.fixture(scope="session")
def bake_lock(bake_system: System) -> dict:
    """The parsed ``bake.lock.json`` of what is checked: ``version``, ``manifest_digest`` and ``assets``."""
    facts = Facts(bake_system.ref, root=bake_system.asset_root)
    _read_lock(bake_system, facts)
    if facts.lock is None:
        pytest.fail(f"{bake_system.ref}: {facts.problem}", pytrace=False)
    return facts.lock


@pytest.fixture(scope="session")
def bake_serve(bake_system: System, bake_lock: dict) -> Serve:
    """The consumer locations: ``bake.serve``, or the built-ins for images sealed before it."""
    facts = Facts(bake_system.ref, root=bake_system.asset_root, lock=bake_lock)
    _read_serve(bake_system, facts)
    if facts.serve_problem is not None:
        pytest.fail(f"{bake_system.ref}: {facts.serve_problem}", pytrace=False)
    return facts.serve


@pytest.fixture(scope="session")
def bake_host(pytestconfig: pytest.Config, request: pytest.FixtureRequest) -> Iterator[Any]:
    """A testinfra host: on a ``--network none`` container of the image (removed afterwards), or with
    --bake-local testinfra's local backend on the running system."""
    try:
        import testinfra
    except ImportError:
        pytest.fail(f"bake.testing needs pytest-testinfra: {EXTRA}", pytrace=False)
    if local_mode(pytestconfig):
        yield testinfra.get_host("local://")
        return
    container = request.getfixturevalue("bake_image_under_test").start_host()
    try:
        yield testinfra.get_host(f"docker://{container.id}")
    finally:
        container.remove(force=True)


@pytest.fixture(scope="session")
def bake_run(bake_system: System) -> Callable[..., JobResult]:
    """``bake_run(*command, environment=None, timeout=120, **options)``: a job through the ENTRYPOINT
    (with --bake-local: a child of this process, in the environment the runner's line left).

    Returns a JobResult (``exit_code``, ``stdout``, ``stderr``); the container is removed.
    """
    return bake_system.run
