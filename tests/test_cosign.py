"""bake.cosign: which keys it takes, and how a missing cosign or password is reported.

The key checks are pure; the tests that make a key pair need the cosign program (tests/signed.py
skips them without it, and fails them under CI=true) and keep the docker mark of tests/test_signing.py,
which they come from, so they run where scripts/toolchain.sh installed cosign.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bake.cosign import Cosign, CosignError, check_key
from bake.errors import UsageError
from tests.signed import key_pair, signer


@pytest.mark.docker
@pytest.mark.timeout(300)
def test_a_wrong_password_is_a_named_cosign_failure(keys, tmp_path: Path) -> None:
    key, _ = key_pair(tmp_path, "locked", password="s3cret")
    with pytest.raises(CosignError, match="set COSIGN_PASSWORD to the private key's password"):
        signer(key)


@pytest.mark.docker
@pytest.mark.timeout(300)
def test_no_password_and_no_terminal_is_a_usage_error_before_cosign_runs(keys, monkeypatch) -> None:
    monkeypatch.delenv("COSIGN_PASSWORD")
    with pytest.raises(UsageError, match="set COSIGN_PASSWORD to the private key's password"):
        signer(keys[0])


@pytest.mark.docker
@pytest.mark.timeout(300)
def test_missing_cosign_is_a_usage_error_with_the_install_line(keys) -> None:
    with pytest.raises(UsageError, match=r"cosign not found on PATH; install cosign \(Debian 13"):
        Cosign(keys[1], program="cosign-not-installed")


@pytest.mark.parametrize("key", ["no/such.pub", "ftp://host/key"])
def test_a_key_cosign_cannot_take_is_a_usage_error(key: str) -> None:
    with pytest.raises(UsageError, match="--verify-key"):
        check_key(key, "--verify-key")


def test_kms_uris_pass_as_they_are() -> None:
    assert check_key("awskms:///alias/bake", "--sign") == "awskms:///alias/bake"
