"""Build the stand-in's pure-Python wheel with the standard library only (no pip in the stand-in base).

python3 tools/build_wheel.py PACKAGE_DIR OUT_DIR
"""

import base64
import hashlib
import os
import sys
import zipfile

NAME = "vllm"
# A fixed timestamp, so the same sources always give the same wheel bytes.
EPOCH = (1980, 1, 1, 0, 0, 0)


def record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def main(package, out):
    namespace = {}
    with open(os.path.join(package, "__init__.py")) as fh:
        exec(fh.read(), namespace)
    version = namespace["__version__"]
    dist_info = f"{NAME}-{version}.dist-info"
    files = {}
    for name in sorted(os.listdir(package)):
        if name.endswith(".py"):
            with open(os.path.join(package, name), "rb") as fh:
                files[f"{NAME}/{name}"] = fh.read()
    files[f"{dist_info}/METADATA"] = f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {version}\n".encode()
    files[f"{dist_info}/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: standin\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    record = [record_line(n, d) for n, d in files.items()] + [f"{dist_info}/RECORD,,"]
    files[f"{dist_info}/RECORD"] = ("\n".join(record) + "\n").encode()
    os.makedirs(out, exist_ok=True)
    wheel = os.path.join(out, f"{NAME}-{version}-py3-none-any.whl")
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(zipfile.ZipInfo(name, EPOCH), data)
    print(wheel)


if __name__ == "__main__":
    main(*sys.argv[1:])
