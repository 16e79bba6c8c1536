"""vLLM's released asset code, importable without vLLM's heavy imports: a site for the tests' jobs.

``make_site(target)`` puts the released files (``tests.assets.vllm_release``: ``vllm/envs.py``
and ``vllm/assets/*.py``, unchanged) under ``target`` and stands in, at the module boundary, only
for what ``get_vllm_public_assets`` does not need: vllm's package ``__init__`` (it imports
torch), the asset classes' loaders' imports (torch, PIL, numpy, ``vllm.multimodal``) and the
HTTP download (``vllm.connections``), whose every call records its URL and raises. ``PROBE``
(``target/vllm_probe.py``), run with ``target`` on PYTHONPATH in the job's environment, calls
vLLM's own functions and prints one JSON report; a test fails when its ``downloads`` is not empty.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.assets import VLLM_BUCKET, VLLM_RELEASE, VLLM_RULE_FILES, vllm_release

# Two of vLLM's public test assets (made-up bytes), where bake bakes them and where vLLM fetches them;
# SPECS asks PROBE for each through its asset class.
IMAGE = b"a stop sign, as jpeg bytes\n" * 64
AUDIO = b"a winning call, as ogg bytes\n" * 64
IMAGE_URL = f"{VLLM_BUCKET}vision_model_images/stop_sign.jpg"
AUDIO_URL = f"{VLLM_BUCKET}multimodal_asset/winning_call.ogg"
FILES = {"vllm_public_assets/stop_sign.jpg": IMAGE, "vllm_public_assets/winning_call.ogg": AUDIO}
URLS = {"vllm_public_assets/stop_sign.jpg": IMAGE_URL, "vllm_public_assets/winning_call.ogg": AUDIO_URL}
SPECS = {"image:stop_sign:jpg": "stop_sign.jpg", "audio:winning_call": "winning_call.ogg"}

# A loader the probe never calls: the asset classes import it, get_vllm_public_assets does not need it.
_UNUSED = "\n\ndef {}(*args, **kwargs):\n    raise RuntimeError('a stand-in: bake tests never load assets')\n"
STANDINS = {
    "vllm/__init__.py": '"""Stand-in: the released vllm/__init__.py imports torch (vllm.env_override)."""\n',
    "vllm/connections.py": '''"""Stand-in for vllm.connections: the download vLLM falls back to.

Any call is a download the baked files should have made unnecessary: it is recorded and refused.
"""

DOWNLOADS = []


class _Refused:
    def download_file(self, url, save_path, *, timeout=None, **kwargs):
        DOWNLOADS.append({"url": str(url), "path": str(save_path)})
        raise RuntimeError(f"vLLM tried to download {url} to {save_path}: the baked file was not served")


global_http_connection = _Refused()
''',
    "vllm/multimodal/__init__.py": "",
    "vllm/multimodal/media/__init__.py": "",
    "vllm/multimodal/media/audio.py": _UNUSED.format("load_audio"),
    "torch/__init__.py": "class Tensor:\n    pass\n" + _UNUSED.format("load"),
    "PIL/__init__.py": "",
    "PIL/Image.py": "class Image:\n    pass\n" + _UNUSED.format("open"),
    "numpy/__init__.py": "",
    "numpy/typing.py": "NDArray = object\n",
}

# CLASS:NAME[:EXT] (image, audio) or base:FILENAME:PREFIX, each through vLLM's own code.
PROBE = r"""
import hashlib, json, os, sys

import vllm.connections
from vllm.assets.audio import AudioAsset
from vllm.assets.base import get_vllm_public_assets
from vllm.assets.image import ImageAsset


def lookup(spec):
    kind, name, *rest = spec.split(":")
    if kind == "image":
        return ImageAsset(name).get_path(rest[0])
    if kind == "audio":
        return AudioAsset(name).get_local_path()
    return get_vllm_public_assets(name, rest[0] if rest else None)


report = {"results": {}, "cwd": os.getcwd()}
for spec in sys.argv[1:]:
    try:
        path = str(lookup(spec))
        with open(path, "rb") as fh:
            digest = hashlib.sha256(fh.read()).hexdigest()
        report["results"][spec] = {
            "path": path, "realpath": os.path.realpath(path), "link": os.path.islink(path), "sha256": digest,
        }
    except Exception as exc:
        report["results"][spec] = {"error": f"{type(exc).__name__}: {exc}"}
report["downloads"] = vllm.connections.DOWNLOADS
report["torch_is_a_stand_in"] = not hasattr(sys.modules.get("torch"), "cuda")
print(json.dumps(report))
"""


def released() -> Path:
    """The released files (``tests.assets.vllm_release``); fails the test when pip cannot fetch them."""
    try:
        return vllm_release()
    except subprocess.CalledProcessError as exc:
        pytest.fail(f"pip could not fetch vllm=={VLLM_RELEASE} ({exc}); the vLLM asset tests need it")


def make_site(target: Path) -> Path:
    """Lay out the released files, the stand-ins and ``vllm_probe.py`` under ``target``; return it."""
    release = released()
    for name in VLLM_RULE_FILES:
        if name.startswith("vllm/"):
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(release / name, target / name)
    for name, text in STANDINS.items():
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        (target / name).write_text(text)
    (target / "vllm_probe.py").write_text(PROBE)
    return target


def probe(site: Path, env: dict[str, str], cwd: Path, *specs: str) -> dict:
    """Run vLLM's own asset code (PROBE) from ``site`` in ``env`` from ``cwd``; return its report."""
    proc = subprocess.run(
        [sys.executable, str(site / "vllm_probe.py"), *specs],
        env={**env, "PYTHONPATH": str(site)},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)
