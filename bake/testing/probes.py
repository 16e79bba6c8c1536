"""Small Python programs run inside the image, as jobs, to see what a consumer would see.

Each reads a JSON argument and prints one JSON report. They use the image's own python3, its
standard library, and (LOCATIONS) the image's own bake, which needs nothing more.
"""

from __future__ import annotations

# Resolves every location of bake.serve in the job's environment (after the entrypoint ran)
# with the image's own bake (bake.locations, the one resolver; bake.hashes), and reports, per
# location, each served file and link.
LOCATIONS = r"""
import json, os, sys

cfg = json.loads(sys.argv[1])
root = cfg["root"]
sys.path.insert(0, cfg["lib"])
from bake.hashes import sha256_file
from bake.locations import Location


def check_file(directory, item):
    path = os.path.join(directory, item["name"])
    baked = os.path.join(root, item["asset"])
    if not os.path.lexists(path):
        return "missing"
    if not os.path.isfile(path):
        return "a dangling link" if os.path.islink(path) else "not a regular file"
    size = os.path.getsize(path)
    if size != item["size"]:
        return f"{size} bytes, expected {item['size']}"
    if os.path.realpath(path) != os.path.realpath(baked) and sha256_file(path) != sha256_file(baked):
        return "different bytes from the baked file"
    return None


def check_link(directory, item):
    path = os.path.join(directory, item["name"])
    if not os.path.lexists(path):
        return "missing"
    if not os.path.exists(path):
        return "a dangling link"
    return None


known, report = {}, {}
for loc in cfg["locations"]:
    known[loc["id"]] = Location.from_record(loc["mode"], loc["var"], loc["sub"], loc["fallback"], known)
    directory = known[loc["id"]].resolve(os.environ)
    mine = [f for f in cfg["files"] if f["loc"] == loc["id"]] if directory else []
    files = {f["name"]: check_file(str(directory), f) for f in mine}
    mine = [k for k in cfg["links"] if k["loc"] == loc["id"]] if directory else []
    links = {k["name"]: check_link(str(directory), k) for k in mine}
    report[loc["id"]] = {"dir": str(directory) if directory else None, "files": files, "links": links}
print(json.dumps(report))
"""

# Which of the named distributions are installed in the image: {name: version or null}.
INSTALLED = r"""
import importlib.metadata, json, sys

found = {}
for name in json.loads(sys.argv[1]):
    try:
        found[name] = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        found[name] = None
print(json.dumps(found))
"""

# Resolves one baked Hub repository offline with huggingface_hub (HF_HUB_OFFLINE=1 in the job)
# and reports which expected files it found in the snapshot.
HUB = r"""
import json, os, sys

cfg = json.loads(sys.argv[1])
from huggingface_hub import snapshot_download

try:
    path = snapshot_download(cfg["repo_id"], repo_type=cfg["repo_type"], revision=cfg["revision"])
except Exception as exc:
    print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
    raise SystemExit(0)
missing = [f for f in cfg["files"] if not os.path.isfile(os.path.join(path, f))]
print(json.dumps({"path": path, "missing": missing}))
"""
