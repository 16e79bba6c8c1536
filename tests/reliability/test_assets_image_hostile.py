"""--assets-image against registries that do not say "missing": refusals, rate limits, odd answers.

Only the registry's definite "manifest unknown" starts a publish (issue 10, class 9);
every other answer is exit 5 with a message of its own. The first publish to a
registry that answers 401 until `docker login` is tested end to end in
tests/test_assets_image.py.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from bake.assets_image import registry_digest
from bake.errors import BuildError
from tests.registries import (
    PASSWORD,
    USER,
    AnsweringRegistry,
    AuthRegistry,
    docker_login,
    free_port,
    push_manifest,
)

SHA_A = "a" * 64


def test_a_registry_that_cannot_answer_is_a_build_error_not_a_missing_image(engine: None) -> None:
    ref = f"127.0.0.1:{free_port()}/bake-assets:{SHA_A}"
    with pytest.raises(BuildError, match="connection refused") as caught:
        registry_digest(ref)
    assert ref in str(caught.value) and "reachable" in str(caught.value)


def _errors(code: str, message: str) -> dict:
    return {"errors": [{"code": code, "message": message}]}


# id -> (what the registry answers, what the message must say)
ODD_ANSWERS = {
    "rate limit": (dict(status=429, body=_errors("TOOMANYREQUESTS", "slow down")), "rate-limiting"),
    "denied": (
        dict(status=403, body=_errors("DENIED", "requested access to the resource is denied")),
        "denies",
    ),
    "token endpoint answers 404": (dict(status=200, bearer=True, token_status=404), "no definite answer"),
    "token endpoint answers 500": (dict(status=200, bearer=True, token_status=500), "no definite answer"),
    "not a registry: 404 everywhere": (dict(status=404), "no definite answer"),
    "server error": (dict(status=503), "no definite answer"),
}


@pytest.mark.parametrize(("answer", "says"), ODD_ANSWERS.values(), ids=ODD_ANSWERS.keys())
def test_only_a_definite_answer_means_missing(
    engine: None, docker_config: Path, answer: dict, says: str
) -> None:
    with AnsweringRegistry(**answer) as registry:
        ref = f"{registry.host}/bake-assets:{SHA_A}"
        with pytest.raises(BuildError) as caught:
            registry_digest(ref)
    assert says in str(caught.value) and ref in str(caught.value)


def test_a_registry_that_wants_a_login_says_so(auth_registry: AuthRegistry, docker_config: Path) -> None:
    ref = f"{auth_registry.host}/bake-assets:{SHA_A}"
    with pytest.raises(BuildError) as caught:
        registry_digest(ref)
    assert f"docker login {auth_registry.host}" in str(caught.value)
    assert docker_login(auth_registry.host, "wrong").returncode != 0
    assert docker_login(auth_registry.host).returncode == 0
    assert registry_digest(ref) is None
    push_manifest(ref, (USER, PASSWORD))
    assert registry_digest(ref) is not None


def test_refused_credentials_are_an_auth_failure(auth_registry: AuthRegistry, docker_config: Path) -> None:
    # What `docker login` stored no longer works (a rotated password): the engine answers 401.
    auth = base64.b64encode(f"{USER}:rotated".encode()).decode()
    (docker_config / "config.json").write_text(json.dumps({"auths": {auth_registry.host: {"auth": auth}}}))
    with pytest.raises(BuildError, match="refused the credentials") as caught:
        registry_digest(f"{auth_registry.host}/bake-assets:{SHA_A}")
    assert f"docker login {auth_registry.host}" in str(caught.value)
