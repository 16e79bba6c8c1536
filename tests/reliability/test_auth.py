"""Mirrors behind Basic auth: credentials in a URL's userinfo are sent to that URL's own origin only.

Origin is scheme, host and port: a redirect to another port, or to another name for the same
address, gets no Authorization header. The password appears in no output, report or file. In a
build, such mirrors come through the bake_mirrors secret; the fetch stage refuses credentials in
the ASSET_MIRRORS build argument, which provenance records.
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.image import fail_or_skip
from tests.mirror import Mirror, http_error, redirect, truncate

from . import KIB, REPO, asset_entry, bake, blob, cli_env, error_text, files_under, manifest_text, sha256

DATA = blob(700 * KIB + 3, "auth")
USER, PASSWORD = "reader", "p@ss:w/rd%x"  # every character that needs percent-encoding in userinfo
QUOTED = "p%40ss%3Aw%2Frd%25x"
BASIC = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()


def creds_url(m: Mirror, path: str, password: str = QUOTED) -> str:
    return f"http://{USER}:{password}@{m.base_url.removeprefix('http://')}{path}"


def fetch(tmp_path: Path, url: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess[str]:
    manifest = tmp_path / "assets.toml"
    manifest.write_text(manifest_text([asset_entry("priv", "x/priv.bin", DATA, url)]))
    report = tmp_path / "report.json"
    common = ["--dest", tmp_path / "dest", "--cache-dir", tmp_path / "cache", "--json", report]
    return bake(
        "-v", "fetch", "--manifest", manifest, *common, "--timeout", "2", "--deadline", "20", *args, env=env
    )


def assert_secret_nowhere(tmp_path: Path, proc: subprocess.CompletedProcess[str]) -> None:
    written = [tmp_path / "report.json"] if (tmp_path / "report.json").exists() else []
    for root in (tmp_path / "dest", tmp_path / "cache"):
        written += [root / rel for rel in files_under(root)]
    for secret in (PASSWORD, QUOTED, BASIC):
        assert secret not in proc.stdout + proc.stderr
        for path in written:  # everything bake wrote: the destination, the cache, the report
            assert secret.encode() not in path.read_bytes(), f"{path} holds the password"


@pytest.mark.parametrize("how", ["manifest-url", "--mirror", "BAKE_MIRRORS"])
@pytest.mark.parametrize("connections", ["1", "4"])
def test_credentials_in_the_url_reach_the_mirror(tmp_path: Path, how: str, connections: str) -> None:
    with Mirror({"/priv.bin": DATA}, basic_auth=(USER, PASSWORD)) as m:
        env, args, url = {}, ["--connections", connections], creds_url(m, "/priv.bin")
        rewrite = f"https://origin.invalid/={creds_url(m, '/')}"
        if how != "manifest-url":
            url = "https://origin.invalid/priv.bin"
            args += ["--no-origin"]
            args += ["--mirror", rewrite] if how == "--mirror" else []
            env = {"BAKE_MIRRORS": rewrite} if how == "BAKE_MIRRORS" else {}
        proc = fetch(tmp_path, url, *args, env=env)
        sent = {r["authorization"] for r in m.log}
    assert proc.returncode == 0, proc.stderr
    assert sha256((tmp_path / "dest/x/priv.bin").read_bytes()) == sha256(DATA)
    assert sent == {BASIC}
    assert_secret_nowhere(tmp_path, proc)


@pytest.mark.parametrize("where", ["other-port", "other-host-name"])
def test_credentials_never_follow_a_redirect_to_another_origin(tmp_path: Path, where: str) -> None:
    with Mirror({"/priv.bin": DATA}, basic_auth=(USER, PASSWORD)) as m, Mirror({"/pub.bin": DATA}) as other:
        if where == "other-port":
            target = other.url("/pub.bin")
        else:  # the same server under another name: still another origin
            target = m.base_url.replace("127.0.0.1", "localhost") + "/priv.bin"
        m.script("/priv.bin", redirect(target))  # sent only after the credentials were accepted
        proc = fetch(tmp_path, creds_url(m, "/priv.bin"), "--connections", "1", "--attempts", "1")
        first = m.log[0]["authorization"]
        elsewhere = [r["authorization"] for r in (other.log if where == "other-port" else m.log[1:])]
    assert first == BASIC
    assert elsewhere and set(elsewhere) == {None}, "the credentials followed the redirect"
    if where == "other-port":
        assert proc.returncode == 0, proc.stderr
    else:
        assert proc.returncode == 3, proc.stderr  # the other name is refused without credentials
        assert "401" in error_text(proc.stderr)
    assert_secret_nowhere(tmp_path, proc)


def test_a_refused_password_is_exit_3_not_retried_and_not_printed(tmp_path: Path) -> None:
    with Mirror({"/priv.bin": DATA}, basic_auth=(USER, PASSWORD)) as m:
        proc = fetch(tmp_path, creds_url(m, "/priv.bin", password="wrong-one"))
        asked = m.requests["/priv.bin"]
    assert proc.returncode == 3, proc.stderr
    errors = error_text(proc.stderr)
    assert "asset 'priv'" in errors and "401" in errors
    assert "wrong-one" not in proc.stdout + proc.stderr
    assert asked == 1


# -- the fetch stage of a build ----------------------------------------------------------------------


def fetch_stage(tmp_path: Path, manifest: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """docker/fetch-assets.sh as the Dockerfile's fetch RUN calls it, on this host, with this checkout."""
    venv_bin = os.path.dirname(sys.executable)
    stage_env = cli_env({"PATH": f"{venv_bin}:{os.environ['PATH']}", **env})
    for name in ("ASSET_MIRRORS", "BAKE_MIRRORS", "BAKE_FETCH_ARGS", "ASSET_GROUPS", "ASSET_DIGEST"):
        if name not in env:
            stage_env.pop(name, None)  # the build arguments this run does not set
    stage_env["XDG_CACHE_HOME"] = str(tmp_path / "xdg-cache")
    return subprocess.run(
        [
            "sh",
            str(REPO / "docker/fetch-assets.sh"),
            str(manifest),
            str(tmp_path / "out"),
            "/opt/bake/assets",
        ],
        env=stage_env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_fetch_stage_refuses_credentials_in_asset_mirrors(tmp_path: Path) -> None:
    manifest = tmp_path / "assets.toml"
    manifest.write_text(
        manifest_text([asset_entry("priv", "x/priv.bin", DATA, "https://origin.invalid/priv.bin")])
    )
    mirrors = f"https://origin.invalid/=http://{USER}:{QUOTED}@127.0.0.1:9/"
    proc = fetch_stage(tmp_path, manifest, {"ASSET_MIRRORS": mirrors})
    assert proc.returncode == 2, proc.stderr
    assert "ASSET_MIRRORS" in proc.stderr and "bake_mirrors" in proc.stderr
    assert QUOTED not in proc.stdout + proc.stderr
    assert not (tmp_path / "out").exists()


def test_the_fetch_stage_takes_credentials_from_the_bake_mirrors_secret(tmp_path: Path) -> None:
    manifest = tmp_path / "assets.toml"
    manifest.write_text(
        manifest_text([asset_entry("priv", "x/priv.bin", DATA, "https://origin.invalid/priv.bin")])
    )
    with Mirror({"/priv.bin": DATA}, basic_auth=(USER, PASSWORD)) as m, Mirror({"/priv.bin": DATA}) as public:
        env = {
            # The secret, as `--mount=type=secret,id=bake_mirrors,env=BAKE_MIRRORS` sets it ...
            "BAKE_MIRRORS": f"https://origin.invalid/={creds_url(m, '/')}",
            # ... next to a mirror without credentials, which may stay a build argument.
            "ASSET_MIRRORS": f"https://elsewhere.invalid/={public.base_url}/",
            "BAKE_FETCH_ARGS": "--no-origin",
        }
        proc = fetch_stage(tmp_path, manifest, env)
        sent = {r["authorization"] for r in m.log}
    assert proc.returncode == 0, proc.stderr
    assert sha256((tmp_path / "out/opt/bake/assets/x/priv.bin").read_bytes()) == sha256(DATA)
    assert sent == {BASIC}
    assert QUOTED not in proc.stdout + proc.stderr and PASSWORD not in proc.stdout + proc.stderr


def test_a_kept_partial_holds_no_password(tmp_path: Path) -> None:
    """The cache outlives the fetch (a BuildKit cache mount): its progress record names the URL redacted."""
    with Mirror({"/priv.bin": DATA}, basic_auth=(USER, PASSWORD)) as m:
        m.script("/priv.bin", truncate(300 * KIB), *[http_error(403)] * 10)
        proc = fetch(tmp_path, creds_url(m, "/priv.bin"), "--connections", "1")
    assert proc.returncode == 3, proc.stderr
    assert [p for p in files_under(tmp_path / "cache") if p.endswith(".json")], "a progress record is kept"
    assert_secret_nowhere(tmp_path, proc)


# -- the same, in a real build: the secret reaches the fetch RUN, the build argument is refused --------


def build_assets(
    manifest: Path, out: Path, *args: str, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """``docker buildx build --target assets`` from the stand-in fetch image, exporting to ``out``."""
    if shutil.which("docker") is None or not os.environ.get("BAKE_STANDIN_BASE"):
        fail_or_skip('docker and BAKE_STANDIN_BASE are needed: eval "$(scripts/toolchain.sh env)"')
    standin = os.environ["BAKE_STANDIN_BASE"]
    command = [
        "docker",
        "buildx",
        "build",
        "-f",
        "docker/Dockerfile",
        "--target",
        "assets",
        "--network",
        "host",
    ]
    command += ["--build-arg", f"FETCH_IMAGE={standin}", "--build-arg", f"BASE_IMAGE={standin}"]
    command += [
        "--build-arg",
        f"ASSET_MANIFEST={manifest.relative_to(REPO)}",
        "--output",
        f"type=local,dest={out}",
    ]
    # A fresh cache directory per build: neither the cache mount nor a cached RUN may serve the bytes.
    command += [
        "--build-arg",
        f"BAKE_FETCH_ARGS=--no-origin --cache-dir /tmp/bake-{uuid.uuid4().hex}",
        *args,
        ".",
    ]
    return subprocess.run(
        command, cwd=REPO, env={**os.environ, **env}, capture_output=True, text=True, timeout=600, check=False
    )


@pytest.fixture
def context_manifest() -> Iterator[Path]:
    """A manifest inside the build context (.work/ is git-ignored scratch), removed afterwards."""
    path = REPO / ".work" / f"auth-{uuid.uuid4().hex}.toml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(
        manifest_text([asset_entry("priv", "x/priv.bin", DATA, "https://origin.invalid/priv.bin")])
    )
    yield path
    path.unlink()


@pytest.mark.docker
@pytest.mark.timeout(900)
def test_a_build_takes_mirror_credentials_only_as_the_bake_mirrors_secret(
    tmp_path: Path, context_manifest: Path
) -> None:
    with Mirror({"/priv.bin": DATA}, basic_auth=(USER, PASSWORD)) as m:
        rewrite = f"https://origin.invalid/={creds_url(m, '/')}"
        secret = ["--secret", "id=bake_mirrors,env=BAKE_MIRRORS"]
        built = build_assets(context_manifest, tmp_path / "out", *secret, env={"BAKE_MIRRORS": rewrite})
        sent = {r["authorization"] for r in m.log}
        refused = build_assets(
            context_manifest, tmp_path / "refused", "--build-arg", f"ASSET_MIRRORS={rewrite}", env={}
        )
    assert built.returncode == 0, built.stderr[-3000:]
    baked = tmp_path / "out/opt/bake/assets/x/priv.bin"
    assert sha256(baked.read_bytes()) == sha256(DATA)
    assert sent == {BASIC}
    for path in (tmp_path / "out").rglob("*"):
        assert not path.is_file() or QUOTED.encode() not in path.read_bytes(), f"{path} holds the password"
    assert refused.returncode != 0
    assert "ASSET_MIRRORS holds credentials" in refused.stderr and "exit code: 2" in refused.stderr
    assert QUOTED not in built.stderr
