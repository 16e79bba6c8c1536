"""The CI pipelines cannot run here, so they are checked: linters, schemas, and their bake invocations.

- ``.github/workflows/assets.yml``: actionlint (with shellcheck on its scripts) and the GitHub
  workflow schema; its docker/bake-action step, rebuilt as the action runs it, resolves with
  ``docker buildx bake --print`` against a metadata-action bake file.
- ``.buildkite/pipeline.yml``: ``check-jsonschema --builtin-schema vendor.buildkite``; each
  ``bake build`` command's bake arguments resolve with ``docker buildx bake --print``.
Each check is first shown to fail on a broken copy, so a pass means something.
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

from tests.image import fail_or_skip

REPO = Path(__file__).resolve().parents[1]
WORKFLOW = REPO / ".github/workflows/assets.yml"
PIPELINE = REPO / ".buildkite/pipeline.yml"
DIGEST = "a" * 64
ASSETS_REF = f"ghcr.io/example/bake-assets:{DIGEST}"
META_TAGS = ["ghcr.io/example/bake-rocm:pr-7", "ghcr.io/example/bake-rocm:sha-1234567"]


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


def test_workflow_passes_actionlint() -> None:
    proc = actionlint(WORKFLOW)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_actionlint_catches_a_broken_workflow(tmp_path: Path) -> None:
    broken = tmp_path / ".github/workflows/assets.yml"
    broken.parent.mkdir(parents=True)
    broken.write_text(WORKFLOW.read_text().replace("steps.assets.outputs.ref", "steps.asets.outputs.ref"))
    proc = actionlint(broken)
    assert proc.returncode == 1 and "asets" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.parametrize(
    ("name", "path"),
    [("vendor.github-workflows", WORKFLOW), ("vendor.buildkite", PIPELINE)],
    ids=["gha", "buildkite"],
)
def test_pipeline_passes_its_schema(name: str, path: Path) -> None:
    proc = schema(name, path)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_buildkite_schema_catches_a_broken_pipeline(tmp_path: Path) -> None:
    doc = yaml.safe_load(PIPELINE.read_text())
    doc["steps"][1]["depends_on"] = {"step": ["image"]}
    broken = tmp_path / "pipeline.yml"
    broken.write_text(yaml.safe_dump(doc))
    proc = schema("vendor.buildkite", broken)
    assert proc.returncode == 1, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def buildx() -> None:
    """`docker buildx bake --print` needs only the client and its plugin, no engine."""
    if run("docker", "buildx", "version").returncode != 0:
        fail_or_skip("docker buildx is not installed; run scripts/toolchain.sh up")


def printed(args: list[str], env: dict | None = None) -> dict:
    proc = run("docker", "buildx", "bake", *args, "--print", env=env)
    assert proc.returncode == 0, f"docker buildx bake {shlex.join(args)} --print: {proc.stderr[-3000:]}"
    return json.loads(proc.stdout)["target"]


def workflow_steps() -> list[dict]:
    (job,) = yaml.safe_load(WORKFLOW.read_text())["jobs"].values()
    return job["steps"]


def test_workflow_uses_the_docker_actions_and_the_hub_secret() -> None:
    uses = {s["uses"].split("@")[0] for s in workflow_steps() if "uses" in s}
    assert {"docker/setup-buildx-action", "docker/bake-action", "docker/metadata-action"} <= uses
    publish = next(s for s in workflow_steps() if s.get("id") == "assets")
    assert publish["env"]["HF_TOKEN"] == "${{ secrets.HF_TOKEN }}"
    assert 'echo "ref=' in publish["run"] and "bake build --assets-image" in publish["run"]


def test_workflow_publish_step_resolves(buildx: None) -> None:
    publish = next(s for s in workflow_steps() if s.get("id") == "assets")
    line = next(x for x in publish["run"].splitlines() if x.startswith("bake build --assets-image"))
    bake_args = shlex.split(line)[shlex.split(line).index("--") + 1 :]
    targets = printed(bake_args, env={"HF_TOKEN": "hf_dummy"})
    assert targets["assets"]["target"] == "assets"
    assert {"id": "hf_token", "env": "HF_TOKEN"} in targets["assets"]["secret"]


def test_workflow_bake_action_step_resolves_with_the_assets_ref(buildx: None, tmp_path: Path) -> None:
    """Rebuild the command docker/bake-action runs (default Git context: files read in the repo)."""
    step = next(s for s in workflow_steps() if s.get("uses", "").startswith("docker/bake-action@"))
    assert "source" not in step["with"]  # the default Git context: the supported way is named contexts
    meta = tmp_path / "docker-metadata-action-bake.json"
    meta.write_text(json.dumps({"target": {"docker-metadata-action": {"tags": META_TAGS, "labels": {}}}}))
    outputs = {
        "steps.meta.outputs.bake-file": str(meta),
        "steps.assets.outputs.ref": ASSETS_REF,
        "steps.assets.outputs.digest": DIGEST,
    }

    def expand(text: str) -> str:
        return re.sub(r"\$\{\{\s*([^}]+?)\s*\}\}", lambda m: outputs[m.group(1)], text)

    args = []
    for line in step["with"]["files"].splitlines():
        args += ["-f", expand(line.strip()).removeprefix("cwd://")]
    for line in step["with"]["set"].splitlines():
        args += ["--set", expand(line.strip())]
    image = printed([*args, step["with"]["targets"]])["image"]
    assert image["contexts"] == {"assets": f"docker-image://{ASSETS_REF}"}
    assert image["args"]["ASSET_DIGEST"] == DIGEST
    assert image["tags"] == META_TAGS
    assert image["target"] == "image"


def buildkite_bake_args() -> list[list[str]]:
    """The bake arguments of every `bake build` line in the pipeline, with its env expanded."""
    doc = yaml.safe_load(PIPELINE.read_text())
    env = {**doc["env"], "BUILDKITE_COMMIT": "0123abc"}
    env["IMAGE"] = env["IMAGE"].replace("${BUILDKITE_COMMIT}", env["BUILDKITE_COMMIT"])
    found = []
    for step in doc["steps"]:
        for line in str(step.get("command", "")).splitlines():
            if line.startswith("bake build"):
                line = re.sub(r"\$\$([A-Z_]+)", lambda m: env[m.group(1)], line)
                words = shlex.split(line)
                found.append(words[words.index("--") + 1 :])
    return found


def test_buildkite_bake_invocation_resolves(buildx: None) -> None:
    (args,) = buildkite_bake_args()
    image = printed(args, env={"HF_TOKEN": "hf_dummy"})["image"]
    assert image["tags"] == ["registry.example.internal/rocm-ci/bake:0123abc"]
    assert image["output"] == [{"type": "registry"}]
    assert {"id": "hf_token", "env": "HF_TOKEN"} in image["secret"]
