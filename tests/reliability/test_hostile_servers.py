"""Servers that lie or misbehave, through the real CLI: each gets a named exit, or a way around it.

Sizes past what any file can hold, wrong answers to Range, a gzip body nobody asked for, a file
replaced under a server that only sends Last-Modified, and TLS failures other than an unknown CA.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.mirror import Mirror, bad_range, claim_size, gzip_body, range_mismatch, replace, truncate

from . import MIB, asset_entry, bake, blob, error_text, manifest_text, sha256

DATA = blob(6 * MIB + 11, "hostile")


def fetch(tmp_path: Path, entries: list[dict], *args: str) -> subprocess.CompletedProcess[str]:
    manifest = tmp_path / "assets.toml"
    manifest.write_text(manifest_text(entries))
    common = ["--dest", tmp_path / "dest", "--cache-dir", tmp_path / "cache", "--timeout", "2"]
    return bake("fetch", "--manifest", manifest, *common, "--deadline", "30", "--attempts", "3", *args)


def landed(tmp_path: Path, rel: str, data: bytes) -> bool:
    target = tmp_path / "dest" / rel
    return target.is_file() and sha256(target.read_bytes()) == sha256(data)


# -- sizes past any file ----------------------------------------------------------------------------


@pytest.mark.parametrize("claim", [2**63 - 1, 2**63, 2**64, 10**30], ids=["2^63-1", "2^63", "2^64", "10^30"])
@pytest.mark.parametrize("connections", ["1", "4"])
@pytest.mark.parametrize(
    "sized",
    [
        pytest.param(True, id="manifest-size"),
        pytest.param(False, id="no-size"),
    ],
)
def test_a_size_no_file_can_have_is_a_named_exit_3(
    tmp_path: Path, claim: int, connections: str, sized: bool
) -> None:
    with Mirror({"/f.bin": DATA}) as m:
        m.script("/f.bin", *[claim_size(claim)] * 100)
        entry = asset_entry("huge", "x/huge.bin", DATA, m.url("/f.bin"), size=sized)
        proc = fetch(tmp_path, [entry], "--connections", connections)
    assert proc.returncode == 3, proc.stderr
    assert "Traceback" not in proc.stderr
    errors = error_text(proc.stderr)
    assert "asset 'huge'" in errors
    if claim >= 2**63 and not sized:  # no file can be that long: said so, naming the claim
        assert str(claim) in errors and "more than any file" in errors, errors


# -- wrong answers to Range ---------------------------------------------------------------------------

FALLBACK_NOTE = "one plain stream"


@pytest.mark.parametrize(
    "fault",
    [bad_range(1), bad_range(-4096), range_mismatch()],
    ids=["content-range-shifted", "content-range-shifted-back", "206-for-another-range"],
)
@pytest.mark.parametrize("connections", ["1", "4"])
@pytest.mark.parametrize("sized", [True, False], ids=["manifest-size", "no-size"])
def test_a_source_that_answers_range_wrongly_is_read_as_one_plain_stream(
    tmp_path: Path, fault, connections: str, sized: bool
) -> None:
    with Mirror({"/f.bin": DATA}) as m:
        # With one connection the first request asks for everything; cut it short, so a resume asks a range.
        first = [truncate(MIB)] if connections == "1" else []
        m.script("/f.bin", *first, *[fault] * 200)  # every ranged request; a plain GET is served right
        entry = asset_entry("ranges", "x/ranges.bin", DATA, m.url("/f.bin"), size=sized)
        proc = fetch(tmp_path, [entry], "--connections", connections)
        log = list(m.log)
    assert proc.returncode == 0, proc.stderr
    assert landed(tmp_path, "x/ranges.bin", DATA)
    assert proc.stderr.count(FALLBACK_NOTE) == 1, proc.stderr  # said once, naming the source
    note = next(line for line in proc.stderr.splitlines() if FALLBACK_NOTE in line)
    assert m.url("/f.bin") in note
    # After the wrong answer, one request without Range brought the whole file.
    wrong = max(i for i, r in enumerate(log) if r["range"] is not None)
    assert [(r["range"], r["status"]) for r in log[wrong + 1 :]] == [(None, 200)]


# -- Content-Encoding ---------------------------------------------------------------------------------


@pytest.mark.parametrize("sized", [True, False], ids=["manifest-size", "no-size"])
def test_a_gzip_body_is_named_and_not_retried(tmp_path: Path, sized: bool) -> None:
    with Mirror({"/f.bin": DATA}) as m, Mirror({"/f.bin": DATA}) as clean:
        m.script("/f.bin", *[gzip_body()] * 20)
        entries = [asset_entry("gz", "x/gz.bin", DATA, m.url("/f.bin"), size=sized)]
        proc = fetch(tmp_path, entries)
        asked = m.requests["/f.bin"]
        # With a second, well-behaved source, the asset lands from it.
        entries = [asset_entry("gz", "x/gz.bin", DATA, m.url("/f.bin"), clean.url("/f.bin"), size=sized)]
        fallback = fetch(tmp_path, entries)
    assert proc.returncode == 3, proc.stderr
    errors = error_text(proc.stderr)
    assert "asset 'gz'" in errors and "Content-Encoding" in errors and "gzip" in errors
    assert asked == 1, f"{asked} requests for a source that answers gzip to 'Accept-Encoding: identity'"
    assert fallback.returncode == 0, fallback.stderr
    assert landed(tmp_path, "x/gz.bin", DATA)


# -- a file replaced mid-download ---------------------------------------------------------------------

OTHER = blob(len(DATA), "hostile-replacement")


@pytest.mark.parametrize("connections", ["1", "4"])
@pytest.mark.parametrize(
    ("validator", "server"),
    [("Last-Modified", {"etag": False, "last_modified": True}), ("ETag", {})],
    ids=["last-modified-only", "etag"],
)
def test_a_file_replaced_mid_download_is_named_as_such(
    tmp_path: Path, connections: str, validator: str, server: dict
) -> None:
    with Mirror({"/f.bin": DATA}, **server) as m:
        m.script("/f.bin", replace(2 * MIB, OTHER))  # 2 MiB into the first answer, the file is replaced
        proc = fetch(
            tmp_path,
            [asset_entry("moved", "x/moved.bin", DATA, m.url("/f.bin"))],
            "--connections",
            connections,
        )
    assert proc.returncode == 3, proc.stderr
    errors = error_text(proc.stderr)
    assert "asset 'moved'" in errors
    assert "changed during the download" in errors and validator in errors, errors


def test_a_file_replaced_by_the_same_bytes_under_last_modified_lands_and_says_so(tmp_path: Path) -> None:
    # Paced, so the client has read what was sent before the reset discards its socket buffer.
    with Mirror({"/f.bin": DATA}, etag=False, last_modified=True, rate=16 * MIB) as m:
        m.script("/f.bin", replace(2 * MIB, DATA))
        proc = fetch(
            tmp_path, [asset_entry("same", "x/same.bin", DATA, m.url("/f.bin"))], "--connections", "1"
        )
        resumed_with = [r["if_range"] for r in m.log if r["range"] and not r["range"].startswith("bytes=0-")]
    assert proc.returncode == 0, proc.stderr
    assert landed(tmp_path, "x/same.bin", DATA)
    assert resumed_with and all(resumed_with), "a resume must carry If-Range with the Last-Modified date"
    assert "Last-Modified" in proc.stderr


# -- TLS: the hint fits the failure -----------------------------------------------------------------

CA_CONFIG = """\
[ca]
default_ca = d
[d]
database = index.txt
serial = serial
new_certs_dir = .
default_md = sha256
policy = p
copy_extensions = copy
unique_subject = no
[p]
commonName = supplied
"""


def self_signed(folder: Path, san: str, *dates: str) -> tuple[str, str]:
    """A self-signed certificate for ``san`` (valid between ``dates`` if given), made with openssl(1)."""
    folder.mkdir()
    key, cert, csr = folder / "key.pem", folder / "cert.pem", folder / "req.csr"
    (folder / "ca.cnf").write_text(CA_CONFIG)
    (folder / "index.txt").write_text("")
    (folder / "serial").write_text("01\n")
    req = ["openssl", "req", "-new", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=bake-test"]
    subprocess.run(
        [*req, "-addext", f"subjectAltName={san}", "-keyout", key, "-out", csr],
        check=True,
        capture_output=True,
    )
    sign = [
        "openssl",
        "ca",
        "-batch",
        "-config",
        "ca.cnf",
        "-selfsign",
        "-keyfile",
        "key.pem",
        "-in",
        "req.csr",
    ]
    when = ["-startdate", dates[0], "-enddate", dates[1]] if dates else ["-days", "2"]
    subprocess.run([*sign, "-out", "cert.pem", *when], check=True, capture_output=True, cwd=folder)
    return str(cert), str(key)


TLS_CASES = {
    # case: (subjectAltName, validity, trusted through --ca-bundle, words the error must carry)
    "unknown-ca": ("IP:127.0.0.1", (), False, ["--ca-bundle"]),
    "expired": ("IP:127.0.0.1", ("20200101000000Z", "20200102000000Z"), True, ["expired"]),
    "hostname-mismatch": ("DNS:mirror.example", (), True, ["127.0.0.1", "mismatch"]),
}


@pytest.mark.parametrize("case", list(TLS_CASES))
def test_a_tls_failure_gets_the_hint_that_fits_it(tmp_path: Path, case: str) -> None:
    san, dates, trusted, words = TLS_CASES[case]
    cert, key = self_signed(tmp_path / "tls", san, *dates)
    with Mirror({"/f.bin": DATA}, tls=(cert, key)) as m:
        entry = asset_entry("tls", "x/tls.bin", DATA, m.url("/f.bin"))
        proc = fetch(tmp_path, [entry], *(["--ca-bundle", cert] if trusted else []))
        asked = m.requests["/f.bin"]
    assert proc.returncode == 3, proc.stderr
    errors = error_text(proc.stderr)
    assert "asset 'tls'" in errors and all(w in errors for w in words), errors
    if case != "unknown-ca":
        assert "--ca-bundle" not in errors, "a CA bundle cannot fix this certificate"
    assert asked == 0 and "retrying" not in proc.stderr  # a certificate does not get better by asking again
