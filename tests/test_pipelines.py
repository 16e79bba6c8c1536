"""The CI pipelines cannot run here, so they are checked: linters, schemas, and what they invoke.

- ``.github/workflows/assets.yml`` and ``release.yml``: actionlint (shellcheck on their scripts)
  and the GitHub workflow schema; ``.buildkite/pipeline.yml``: the Buildkite schema.
- The flow is vLLM's: a CPU step publishes and runs ``bake pin --check``, vLLM's wrapper runs
  unchanged, a GPU step runs ``bake.testing``. Every ``bake`` command line parses with bake's
  own parser; every wrapper target resolves with ``docker buildx bake --print`` in the stand-in
  (docker/examples/vllm). Required variables fail clearly when unset; no host is a placeholder.
Each linter is first shown to fail on a broken copy, so a pass means something.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from bake import cli
from tests.image import fail_or_skip

REPO = Path(__file__).resolve().parents[1]
WORKFLOW = REPO / ".github/workflows/assets.yml"
RELEASE = REPO / ".github/workflows/release.yml"
PIPELINE = REPO / ".buildkite/pipeline.yml"
STANDIN = REPO / "docker/examples/vllm"
WRAPPER = ".buildkite/scripts/ci-bake-rocm.sh"
REQUIRED = ["BAKE_PACKAGE", "BAKE_ASSETS_REPO", "BAKE_RUNTIME_REPO"]


def tool(name: str) -> str:
    """The linter from the test extra (next to this Python), else from PATH."""
    beside = Path(sys.executable).with_name(name)
    found = str(beside) if beside.exists() else shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: pip install -e '.[test]'", pytrace=False)
    return found


def run(*cmd: str, cwd: Path = REPO, env: dict | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cmd,
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def actionlint(path: Path) -> subprocess.CompletedProcess[str]:
    # shellcheck from the test extra checks every `run:` script.
    path_env = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    return run(tool("actionlint"), "-no-color", str(path), env={"PATH": path_env})


def schema(name: str, path: Path) -> subprocess.CompletedProcess[str]:
    return run(tool("check-jsonschema"), "--builtin-schema", name, str(path))


def workflow(path: Path = WORKFLOW) -> dict:
    return yaml.safe_load(path.read_text())


def pipeline() -> dict:
    return yaml.safe_load(PIPELINE.read_text())


def scripts() -> dict[str, str]:
    """Every shell script the pipelines run, by where it is: workflow steps and Buildkite commands."""
    found = {}
    for name, job in workflow()["jobs"].items():
        for number, step in enumerate(job["steps"]):
            if "run" in step:
                found[f"assets.yml {name}#{number}"] = step["run"]
    for step in pipeline()["steps"]:
        # Buildkite reads $$ as a literal $ for the agent's shell.
        found[f"pipeline.yml {step['key']}"] = str(step["command"]).replace("$$", "$")
    return found


# ---- linters and schemas --------------------------------------------------------------------


@pytest.mark.parametrize("path", [WORKFLOW, RELEASE], ids=["assets", "release"])
def test_workflow_passes_actionlint(path: Path) -> None:
    proc = actionlint(path)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_actionlint_catches_a_broken_workflow(tmp_path: Path) -> None:
    broken = tmp_path / ".github/workflows/assets.yml"
    broken.parent.mkdir(parents=True)
    broken.write_text(WORKFLOW.read_text().replace("needs: pins", "needs: pinz"))
    proc = actionlint(broken)
    assert proc.returncode == 1 and "pinz" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.parametrize(
    ("name", "path"),
    [
        ("vendor.github-workflows", WORKFLOW),
        ("vendor.github-workflows", RELEASE),
        ("vendor.buildkite", PIPELINE),
    ],
    ids=["assets", "release", "buildkite"],
)
def test_pipeline_passes_its_schema(name: str, path: Path) -> None:
    proc = schema(name, path)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_buildkite_schema_catches_a_broken_pipeline(tmp_path: Path) -> None:
    doc = pipeline()
    doc["steps"][1]["depends_on"] = {"step": ["bake-pins"]}
    broken = tmp_path / "pipeline.yml"
    broken.write_text(yaml.safe_dump(doc))
    proc = schema("vendor.buildkite", broken)
    assert proc.returncode == 1, proc.stdout + proc.stderr


# ---- vLLM's flow ------------------------------------------------------------------------------


def test_the_flow_is_publish_and_pin_check_then_the_wrapper_then_bake_testing() -> None:
    steps = {step["key"]: step for step in pipeline()["steps"]}
    assert "bake pin --check" in steps["bake-pins"]["command"]
    assert steps["ci-base"]["depends_on"] == "bake-pins" and steps["bake-testing"]["depends_on"] == "ci-base"
    assert "pytest --pyargs bake.testing --bake-image" in steps["bake-testing"]["command"]
    jobs = workflow()["jobs"]
    assert [jobs[j].get("needs") for j in ("pins", "ci-base", "bake-testing")] == [
        "settings",
        "pins",
        "ci-base",
    ]
    assert any("bake.testing" in step.get("run", "") for step in jobs["bake-testing"]["steps"])


RUNNER_LINE = 'bake_env=$(bake-entrypoint --print-env) || exit; eval "$bake_env"'
LOCAL_CHECK = "python3 -m pytest -p bake.testing.plugin --pyargs bake.testing --bake-local"


def test_mi300_runs_bake_testing_locally_after_the_runners_line() -> None:
    """Where the ENTRYPOINT is bypassed (an MI300 pod, a job container), the check is --bake-local."""
    step = {s["key"]: s for s in pipeline()["steps"]}["bake-testing-mi300"]
    # vLLM's runner holds the line (docs/vllm.md); the job it runs is the check.
    assert step["command"] == "bash .buildkite/scripts/hardware_ci/run-amd-test.sh"
    assert step["env"]["AMD_CI_RUNTIME"] == "native" and LOCAL_CHECK in step["env"]["VLLM_TEST_COMMANDS"]
    job = workflow()["jobs"]["bake-testing-mi300"]
    assert job["needs"] == "ci-base" and job["container"]["image"] == "${{ vars.CI_BASE_IMAGE_TAG }}"
    (run_step,) = job["steps"]
    script = run_step["run"]
    assert RUNNER_LINE in script and script.index(RUNNER_LINE) < script.index(LOCAL_CHECK), script


def wrapper_targets() -> list[str]:
    """The targets the pipelines build; vLLM's wrapper is called bare: no -f file, no variable of bake's."""
    targets = []
    for where, script in scripts().items():
        for line in script.splitlines():
            if WRAPPER in line:
                words = shlex.split(line)
                assert words[:1] == [WRAPPER] and len(words) == 2, (
                    f"{where}: {line!r} changes the wrapper's call"
                )
                targets.append(words[1])
    return targets


def test_the_pipelines_call_the_wrapper_unchanged() -> None:
    assert sorted(set(wrapper_targets())) == ["ci-base-rocm-ci-with-deps", "test-rocm-ci-with-artifacts"]
    assert (STANDIN / WRAPPER).is_file()


@pytest.fixture(scope="module")
def buildx() -> None:
    """`docker buildx bake --print` needs only the client and its plugin, no engine."""
    if run("docker", "buildx", "version").returncode != 0:
        fail_or_skip("docker buildx is not installed; run scripts/toolchain.sh up")


@pytest.mark.parametrize("target", sorted(set(wrapper_targets())))
def test_each_wrapper_target_resolves_in_the_standin(buildx: None, target: str) -> None:
    files = ["-f", "docker/docker-bake-rocm.hcl", "-f", "docker/ci-rocm.hcl"]
    proc = run("docker", "buildx", "bake", *files, "--print", target, cwd=STANDIN)
    assert proc.returncode == 0, proc.stderr[-3000:]
    resolved = json.loads(proc.stdout)["target"]
    assert resolved, f"{target} resolves to no target"
    if target.startswith("ci-base"):
        assert resolved["ci-base-rocm-ci"]["target"] == "ci_base"


def bake_lines() -> list[tuple[str, list[str]]]:
    """Each `bake …` command line of the pipelines, its variables replaced by sample values."""
    samples = {"BAKE_MANIFEST": "docker/bake-assets.toml", "HF_TOKEN": "hf_x"}
    found = []
    for where, script in scripts().items():
        for line in script.splitlines():
            if line.strip().startswith("bake "):
                line = re.sub(
                    r"\$\{?(\w+)\}?",
                    lambda m: samples.get(m.group(1), f"registry.test/{m.group(1).lower()}"),
                    line,
                )
                found.append((where, shlex.split(line)[1:]))
    return found


@pytest.mark.parametrize(
    ("where", "args"), bake_lines(), ids=[f"{w}: {' '.join(a[:2])}" for w, a in bake_lines()]
)
def test_each_bake_command_line_parses(where: str, args: list[str]) -> None:
    parsed = cli.build_parser().parse_args(args)
    assert parsed.command in ("publish", "pin"), f"{where}: {args}"
    if parsed.command == "pin":
        assert parsed.check and [str(p) for p in parsed.dockerfiles] == ["docker/Dockerfile.rocm"]


# ---- settings that must be set, and nothing that is a placeholder ---------------------------------


def test_buildkite_fails_the_upload_naming_each_missing_variable() -> None:
    text = PIPELINE.read_text()
    required = dict(re.findall(r"\$\{(\w+)\?([^}]*)\}", text))
    for name in [
        *REQUIRED,
        "BAKE_CPU_QUEUE",
        "BAKE_BUILD_QUEUE",
        "BAKE_GPU_QUEUE",
        "BAKE_MI300_QUEUE",
        "BAKE_MI300_IMAGE",
    ]:
        assert required.get(name, "").startswith(f"set {name} to "), f"{name} is not required with a message"


@pytest.mark.parametrize("unset", ["BAKE_PACKAGE", "BAKE_GPU_RUNNER"])
def test_the_workflow_settings_job_fails_naming_each_missing_variable(unset: str) -> None:
    (step,) = workflow()["jobs"]["settings"]["steps"]
    names = re.findall(r"^\s*check (\w+) ", step["run"], re.MULTILINE)
    assert set(REQUIRED) <= set(names)
    env = {name: f"value-of-{name}" for name in names}
    assert run("bash", "-e", "-c", step["run"], env=env).returncode == 0
    proc = run("bash", "-e", "-c", step["run"], env={**env, unset: ""})
    assert proc.returncode == 1 and f"repository variable {unset} is not set" in proc.stdout, proc.stdout


@pytest.mark.parametrize("path", [WORKFLOW, RELEASE, PIPELINE], ids=["assets", "release", "buildkite"])
def test_no_placeholder_host(path: Path) -> None:
    assert not re.search(r"example\.(com|org|internal)|\.example\b|registry\.example", path.read_text())


# ---- the release ---------------------------------------------------------------------------------


def test_release_builds_tests_on_every_python_then_publishes_with_trusted_publishing() -> None:
    doc = workflow(RELEASE)
    on = doc.get("on", doc.get(True))  # YAML 1.1 reads the bare key `on` as True
    assert on == {"push": {"tags": ["v*"]}}
    jobs = doc["jobs"]
    assert jobs["test"]["needs"] == "build" and jobs["publish"]["needs"] == "test"
    assert jobs["test"]["strategy"]["matrix"]["python"] == ["3.10", "3.11", "3.12", "3.13"]
    assert jobs["publish"]["permissions"] == {"id-token": "write"}
    assert any(s.get("uses", "").startswith("pypa/gh-action-pypi-publish@") for s in jobs["publish"]["steps"])
    assert not any("password" in json.dumps(s) for s in jobs["publish"]["steps"]), (
        "trusted publishing: no token"
    )


def test_the_ci_override_example_requires_its_registry(buildx: None) -> None:
    """docker/bake-ci.hcl names no placeholder registry: unset, it fails saying what to set."""
    files = ["-f", "docker-bake.hcl", "-f", "docker/bake-ci.hcl"]
    unset = run("docker", "buildx", "bake", *files, "--print", "image", env={"CI_REGISTRY": ""})
    assert unset.returncode != 0 and "Set CI_REGISTRY" in unset.stderr, unset.stderr
    proc = run(
        "docker", "buildx", "bake", *files, "--print", "image", env={"CI_REGISTRY": "127.0.0.1:5000/ci"}
    )
    assert proc.returncode == 0, proc.stderr
    image = json.loads(proc.stdout)["target"]["image"]
    assert image["cache-from"] == [{"type": "registry", "ref": "127.0.0.1:5000/ci/bake-cache:main"}]
    assert {"id": "hf_token", "env": "HF_TOKEN"} in image["secret"]
