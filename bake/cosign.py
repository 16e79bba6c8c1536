"""cosign as a child process: sign, attest and verify an image, by digest, with a key pair or a KMS key.

bake never reimplements the signature formats: cosign writes and reads them, under its tag scheme
(``sha256-<digest>.sig``, ``.att``) on a registry without the referrers API. Only ``bake publish
--sign`` and the ``--verify-key`` checks run it; nothing else in bake needs it installed.

A key is what cosign's ``--key`` takes: a key file (``cosign generate-key-pair``; the private one
is read with ``COSIGN_PASSWORD``, or asked for once on a terminal) or a KMS URI (``awskms://``, ``gcpkms://``,
``azurekms://``, ``hashivault://``, ``k8s://``). Without the transparency log (``tlog=False``),
signing skips the upload to Rekor and verifying skips the inclusion check, as a registry with no
route to Rekor needs; docs/building.md says what that trades.
"""

from __future__ import annotations

import base64
import getpass
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from bake.control_chars import escape
from bake.errors import BakeError, UsageError
from bake.exit_status import describe_exit

INSTALL = (
    "install cosign (Debian 13 and later: `apt-get install cosign`; scripts/toolchain.sh installs "
    "trixie's 2.5.0), or put it on PATH; only --sign and the --verify-key checks need it"
)
# cosign's own exit codes for "no signature at all" and "no signature by this key".
NO_SIGNATURES, NO_MATCHING_SIGNATURE = 10, 12
# What cosign's verify-attestation says when no attestation verifies with the key, or none is of the type.
_NO_ATTESTATION = ("no matching attestations", "none of the attestations matched the predicate type")
TIMEOUT = 300
# The variable that hands a signer's public key to cosign's verify (``--key env://…``).
PUBLIC_KEY_VARIABLE = "BAKE_COSIGN_PUBLIC_KEY"
PASSWORD_VARIABLE = "COSIGN_PASSWORD"
# Key references cosign resolves itself, SCHEME://…: keys held by a KMS (or a Kubernetes secret, a
# GitLab project), which decrypt nothing here; and env://VAR, a key file's text in a variable.
KMS_SCHEMES = ("awskms", "gcpkms", "azurekms", "hashivault", "k8s", "gitlab")
_URI_SCHEMES = (*KMS_SCHEMES, "env")


class Unverified(BakeError):
    """An image is unsigned, signed by another key, or lacks a matching attestation (exit 5)."""

    exit_code = 5


class CosignError(BakeError):
    """cosign could not do what was asked: its exit and what it said (exit 5)."""

    exit_code = 5


def check_key(key: str, option: str) -> str:
    """Return ``key`` when cosign can take it: a readable file, or a KMS URI. Raises UsageError."""
    scheme, sep, _ = key.partition("://")
    if (sep and scheme in _URI_SCHEMES) or key.startswith("pkcs11:"):
        return key
    if sep:
        raise UsageError(
            f"{option} {key!r}: not a key file, and {scheme}:// is not a key URI cosign takes "
            f"({', '.join(s + '://' for s in _URI_SCHEMES)}, pkcs11:); give a key file or a KMS URI"
        )
    if not Path(key).is_file() or not os.access(key, os.R_OK):
        raise UsageError(
            f"{option} {key}: no readable key file there; make a key pair with `cosign generate-key-pair`, "
            "or give a KMS URI"
        )
    return key


@dataclass(frozen=True)
class Cosign:
    """cosign with one key: ``key`` (a file or KMS URI) and whether the transparency log is used.

    ``public`` is the PEM of the public key of a private key file, for the checks a signer runs
    first (is it signed already?): cosign verifies with a public key, or with a KMS key itself.
    """

    key: str
    tlog: bool = True
    program: str = "cosign"
    public: str | None = None
    password: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if shutil.which(self.program) is None:
            raise UsageError(f"cosign not found on PATH; {INSTALL}")

    @classmethod
    def signer(cls, key: str, *, tlog: bool = True, program: str = "cosign") -> Cosign:
        """Return cosign signing with ``key``; for a key file, its password and public key are read
        once, here: the password from COSIGN_PASSWORD, or asked for on a terminal.

        Raises UsageError without cosign, or without a password where none can be asked for;
        CosignError when cosign cannot read the key (a wrong password).
        """
        if key.partition("://")[0] in KMS_SCHEMES or key.startswith("pkcs11:"):
            return cls(key, tlog, program)  # the KMS signs, and verifies with the same reference
        password = os.environ.get(PASSWORD_VARIABLE)
        if password is None:
            if not sys.stdin.isatty():
                raise UsageError(
                    f"{key}: set {PASSWORD_VARIABLE} to the private key's password (empty for a key made "
                    "without one); cosign reads it from there when no terminal can ask"
                )
            password = getpass.getpass(f"Password for {key}: ")
        cosign = cls(key, tlog, program, password=password)
        proc = cosign._call("public-key", "--key", key)
        cosign._check("public-key", proc)
        return replace(cosign, public=proc.stdout)

    def sign(self, images: Sequence[str]) -> None:
        """Sign ``images`` (each ``REPO@sha256:…``) in one run: a key file is decrypted once, which
        costs more than the rest. cosign adds no second signature by the same key."""
        self._run("sign", "--yes", *self._upload(), *images)

    def attest(self, image: str, predicate_type: str, predicate: dict) -> None:
        """Attach a signed in-toto attestation of ``predicate`` to ``image`` (``REPO@sha256:…``)."""
        with tempfile.NamedTemporaryFile("w", prefix="bake-predicate-", suffix=".json") as f:
            json.dump(predicate, f, sort_keys=True)
            f.flush()
            self._run(
                "attest", "--yes", *self._upload(), "--type", predicate_type, "--predicate", f.name, image
            )

    def verify(self, image: str) -> None:
        """Return when ``image`` carries a signature that verifies with the key.

        Raises Unverified for an unsigned image or one signed only by other keys, CosignError when
        cosign cannot answer (the registry, the key).
        """
        proc = self._call("verify", *self._verifying(), image)
        if proc.returncode == NO_SIGNATURES:
            raise Unverified("it has no signature")
        if proc.returncode == NO_MATCHING_SIGNATURE:
            raise Unverified(f"no signature on it verifies with {self.key} ({_said(proc)})")
        self._check("verify", proc)

    def attestations(self, image: str, predicate_type: str) -> list[dict]:
        """Return the in-toto statements of type ``predicate_type`` on ``image`` that verify with the key.

        Raises Unverified when there is none, CosignError when cosign cannot answer.
        """
        proc = self._call("verify-attestation", *self._verifying(), "--type", predicate_type, image)
        said = _said(proc)
        if proc.returncode != 0 and any(phrase in said for phrase in _NO_ATTESTATION):
            raise Unverified(
                f"no attestation of type {predicate_type} on it verifies with {self.key} ({said})"
            )
        self._check("verify-attestation", proc)
        statements = []
        for line in proc.stdout.splitlines():
            try:
                envelope = json.loads(line)
                statements.append(json.loads(base64.b64decode(envelope["payload"])))
            except (ValueError, KeyError, TypeError):
                continue  # not an envelope: cosign prints nothing else on stdout, but a line is no proof
        return statements

    def _upload(self) -> tuple[str, ...]:
        return () if self.tlog else ("--tlog-upload=false",)

    def _verifying(self) -> tuple[str, ...]:
        key = f"env://{PUBLIC_KEY_VARIABLE}" if self.public else self.key
        return ("--key", key) + (() if self.tlog else ("--insecure-ignore-tlog=true",))

    def _run(self, command: str, *args: str) -> None:
        self._check(command, self._call(command, "--key", self.key, *args))

    def _call(self, command: str, *args: str) -> subprocess.CompletedProcess[str]:
        cmd = [self.program, command, *args]
        try:
            # stdin closed: cosign reads a key's password from COSIGN_PASSWORD (signer), never a prompt.
            return subprocess.run(
                cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=TIMEOUT, check=False,
                env=self._environment(),
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            raise CosignError(
                f"`{' '.join(cmd)}` did not finish within {TIMEOUT} s; check that the registry (and the KMS "
                "or transparency log, where used) answer, then rerun"
            ) from None
        except OSError as exc:
            raise UsageError(f"cannot run {self.program} ({exc.strerror}); {INSTALL}") from None

    def _environment(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.password is not None:
            env[PASSWORD_VARIABLE] = self.password
        if self.public is not None:
            env[PUBLIC_KEY_VARIABLE] = self.public
        return env

    def _check(self, command: str, proc: subprocess.CompletedProcess[str]) -> None:
        if proc.returncode == 0:
            return
        said = _said(proc)
        todo = "check the registry and the key, then rerun"
        if "decrypt" in said or "password" in said:
            todo = "set COSIGN_PASSWORD to the private key's password, then rerun"
        raise CosignError(f"`cosign {command}` failed ({describe_exit(proc.returncode)}: {said}); {todo}")


def _said(proc: subprocess.CompletedProcess[str]) -> str:
    """cosign's error lines, without its warnings and the repeat it prints on exit."""
    lines = [
        line.strip()
        for line in proc.stderr.splitlines()
        if line.strip() and not line.startswith(("WARNING", "error during command execution"))
    ]
    return escape("; ".join(lines)[-1000:]) or "no message"
