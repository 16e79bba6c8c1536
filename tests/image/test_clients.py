"""The real consumer packages, offline, find the baked files where the entrypoint serves them."""

from __future__ import annotations

import functools
import json
import subprocess
from collections.abc import Callable

import pytest

from . import (
    ALIAS_LINKS,
    ASSET_ROOT,
    CLIENT_PROBE,
    MANIFEST,
    PROBE_TEXT,
    PROBE_TOKENS,
    S3_ASSET,
    S3_NAME,
    run_image,
)

pytestmark = pytest.mark.docker

# Job-local directories, thrown away with the container, as on the AMD pods.
JOB_ENV = {"XDG_CACHE_HOME": "/tmp/job/xdg", "TMPDIR": "/tmp/job"}
# The clients the manifest serves. The last three came with manifest lines only ("one line, no
# code"): a second tiktoken encoding, a declared consumer (NLTK), a second s3tokenizer model.
S3_V2 = "speech_tokenizer_v2_25hz"
CLIENTS = ("harmony", "tiktoken", "s3tokenizer", "tiktoken:cl100k_base", "nltk", f"s3tokenizer:{S3_V2}")
VOCAB_CLIENTS = {"harmony": "TIKTOKEN_RS_CACHE_DIR", "tiktoken": "TIKTOKEN_CACHE_DIR"}
# cl100k_base's tokens for PROBE_TEXT (computed once with the real vocab).
CL100K_TOKENS = [9906, 11, 1917, 0, 426, 7897, 12032, 2865, 27258, 13]
VOCABS = {a.path.split("/")[-1]: f"{ASSET_ROOT}/{a.path}" for a in MANIFEST if a.path.startswith("tiktoken/")}
# The image's alias link beside each vocab, <encoding>.tiktoken, resolving to it (seal's own links).
ALIASES = {
    link.rsplit("/", 1)[-1]: f"{ASSET_ROOT}/tiktoken/{target}"
    for link, target in ALIAS_LINKS.items()
    if link.startswith("tiktoken/")
}
(STOPWORDS,) = [a for a in MANIFEST if a.name == "stopwords"]
(S3_V2_ASSET,) = [a for a in MANIFEST if a.name == S3_V2]


def probe(clients_image: str, client: str, **options: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    """Run the client probe for one client in a fresh --network none job; return the process and report."""
    command = ("-c", CLIENT_PROBE, PROBE_TEXT, client)
    if "entrypoint" not in options:
        command = ("python3", *command)
    proc = run_image(clients_image, *command, env=JOB_ENV, tmpfs=["/tmp/job"], **options)
    assert proc.returncode == 0, proc.stderr
    return proc, json.loads(proc.stdout)


@pytest.fixture(scope="module")
def job(clients_image: str) -> Callable[[str], dict]:
    """``job(client)``: that client's report from a job started through the entrypoint, run once."""
    return functools.cache(lambda client: probe(clients_image, client)[1])


@pytest.mark.parametrize("client", CLIENTS)
def test_client_loads_offline(job: Callable[[str], dict], client: str) -> None:
    assert job(client)[client].get("error") is None
    assert job(client)[client]["ok"] is True


@pytest.mark.parametrize("client", CLIENTS)
def test_client_attempts_no_download(job: Callable[[str], dict], client: str) -> None:
    assert job(client)["attempts"] == []


@pytest.mark.parametrize("client", CLIENTS)
def test_client_never_imports_torch(job: Callable[[str], dict], client: str) -> None:
    assert job(client)["torch_imported"] is False


@pytest.mark.parametrize("client", sorted(VOCAB_CLIENTS))
def test_vocab_client_encodes_and_round_trips(job: Callable[[str], dict], client: str) -> None:
    report = job(client)[client]
    assert (report["tokens"], report["text"]) == (PROBE_TOKENS, PROBE_TEXT)


@pytest.mark.parametrize("client", sorted(VOCAB_CLIENTS))
def test_vocab_client_reads_the_baked_file_through_a_job_local_link(
    job: Callable[[str], dict], client: str
) -> None:
    report = job(client)
    cache = report["env"][VOCAB_CLIENTS[client]]
    assert cache.startswith(JOB_ENV["TMPDIR"] + "/")
    # Only links: one per baked vocab, and the alias link the image has beside each (one cp made the
    # directory of tiktoken's image directory). Nothing was downloaded or written beside them.
    assert report[client]["entries"] == {**VOCABS, **ALIASES}
    assert len(VOCABS) == 2 and len(ALIASES) == 2 and all(name.endswith(".tiktoken") for name in ALIASES)


def test_a_second_encoding_loads_offline_from_one_manifest_entry(job: Callable[[str], dict]) -> None:
    report = job("tiktoken:cl100k_base")["tiktoken:cl100k_base"]
    assert (report["tokens"], report["text"]) == (CL100K_TOKENS, PROBE_TEXT)
    assert report["cache"].startswith(JOB_ENV["TMPDIR"] + "/")


def test_a_declared_consumer_reads_its_own_variable_offline(job: Callable[[str], dict]) -> None:
    report = job("nltk")
    assert report["nltk"]["words"] == ["a", "baked", "is", "of", "the", "this"]
    # NLTK_DATA was unset: the entrypoint exported a job-local directory, with a link at the leaf only.
    assert report["env"]["NLTK_DATA"].startswith(JOB_ENV["TMPDIR"] + "/")
    assert report["nltk"]["entries"] == {"english": f"{ASSET_ROOT}/{STOPWORDS.path}"}


def test_a_second_s3tokenizer_model_is_accepted_by_its_own_download(job: Callable[[str], dict]) -> None:
    report = job(f"s3tokenizer:{S3_V2}")[f"s3tokenizer:{S3_V2}"]
    assert report["table_sha256"] == S3_V2_ASSET.sha256
    assert report["recorded"] == [f"{JOB_ENV['XDG_CACHE_HOME']}/s3tokenizer/{S3_V2}.onnx"]
    assert report["realpaths"] == [f"{ASSET_ROOT}/{S3_V2_ASSET.path}"]
    assert report["warnings"] == []


@pytest.fixture(scope="module")
def s3(job: Callable[[str], dict]) -> dict:
    return job("s3tokenizer")["s3tokenizer"]


def test_s3tokenizer_code_is_its_own(s3: dict) -> None:
    assert s3["defined"] == ["_MODELS", "_SHA256S", "_download", "available_models", "load_model"]


def test_s3tokenizer_models_name_the_test_checkpoint(s3: dict) -> None:
    assert s3["table_sha256"] == S3_ASSET.sha256


def test_s3tokenizer_loads_from_xdg_cache_home(s3: dict) -> None:
    assert s3["recorded"] == [f"{JOB_ENV['XDG_CACHE_HOME']}/s3tokenizer/{S3_NAME}"]


def test_s3tokenizer_path_is_the_baked_file(s3: dict) -> None:
    assert s3["realpaths"] == [f"{ASSET_ROOT}/{S3_ASSET.path}"]


def test_s3tokenizer_accepts_it_without_a_checksum_warning(s3: dict) -> None:
    assert s3["warnings"] == []


@pytest.mark.parametrize("client", CLIENTS)
def test_without_the_entrypoint_each_client_would_download(clients_image: str, client: str) -> None:
    # The control: the same probe, the same job dirs, no bake-entrypoint. Offline it must fail.
    report = probe(clients_image, client, entrypoint="python3")[1]
    assert report[client]["ok"] is False


@pytest.fixture(scope="module")
def doctor(clients_image: str) -> subprocess.CompletedProcess[str]:
    return run_image(clients_image, "bake", "doctor", env=JOB_ENV, tmpfs=["/tmp/job"])


def test_doctor_in_a_job_exits_0(doctor: subprocess.CompletedProcess[str]) -> None:
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr


@pytest.mark.parametrize(
    ("consumer", "asset"),
    [("s3tokenizer", a.path) for a in MANIFEST if a.path.startswith("s3tokenizer/")]
    + [
        (c, a.path)
        for a in MANIFEST
        if a.path.startswith("tiktoken/")
        for c in ("openai-harmony", "tiktoken")
    ]
    + [("nltk", STOPWORDS.path)],
)
def test_doctor_reports_each_client_ok(
    doctor: subprocess.CompletedProcess[str], consumer: str, asset: str
) -> None:

    verdicts = {tuple(line.split()[:3]) for line in doctor.stdout.splitlines() if line.strip()}
    assert ("ok", consumer, f"{asset}:") in verdicts


def test_doctor_without_the_entrypoint_exits_3(clients_image: str) -> None:
    proc = run_image(clients_image, "doctor", entrypoint="bake", env=JOB_ENV, tmpfs=["/tmp/job"])
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "WOULD DOWNLOAD" in proc.stdout
    assert proc.stderr.strip()
