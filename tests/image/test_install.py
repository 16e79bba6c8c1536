"""The README's install, as written, on fresh Debian 12 and 13 roots (the toolchain's debootstrap stand-ins).

The root block runs as root, then the Install block as an ordinary user, in a copy of the checkout:
Debian's own python3, which refuses ``pip install`` outside a venv (PEP 668). The container has host
networking for the package registries alone (Debian's archive, PyPI), through the machine's CA
bundle, as the brief says a build step reaches them; nothing else of this machine is in it.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import pytest

from tests.readme import copy_checkout, install_blocks

from . import fail_or_skip, run_image

pytestmark = [pytest.mark.docker, pytest.mark.timeout(900)]

CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
BASES = {
    "debian-12": os.environ.get("BAKE_STANDIN_BASE", "local/rocm-standin:bookworm"),
    "debian-13": os.environ.get("BAKE_STANDIN_TRIXIE", "local/rocm-standin:trixie"),
}
USER = 1000
STDLIB = 'import sysconfig; print(sysconfig.get_path("stdlib"))'


def _script(root: str, user: str) -> str:
    """Run ``root`` as root, then ``user`` as an ordinary user in their copy of the checkout."""
    as_user = (
        f"setpriv --reuid={USER} --regid={USER} --clear-groups env HOME=/home/user sh -ec {shlex.quote(user)}"
    )

    return "\n".join(
        [
            "set -e",
            "python3 -c 'import sys; assert sys.version_info >= (3, 10)'",
            # Debian marks its python3 externally managed (PEP 668): the README must steer round pip there.
            f'test -e "$(python3 -c {shlex.quote(STDLIB)})/EXTERNALLY-MANAGED"',
            root,
            f"mkdir -p /home/user && cp -a /src /home/user/bake && chown -R {USER}:{USER} /home/user",
            "cd /home/user/bake",
            as_user,
            "ls dist/bake_assets-*-py3-none-any.whl",
        ]
    )


@pytest.mark.parametrize("base", list(BASES))
def test_the_readme_install_works_on_debian_s_own_python(base: str, tmp_path: Path) -> None:
    if not CA_BUNDLE.is_file():
        fail_or_skip(f"{CA_BUNDLE} is missing: pip in the container needs the machine CA to reach PyPI")
    root, user = install_blocks()
    checkout = copy_checkout(tmp_path / "checkout")
    proc = run_image(
        BASES[base],
        "sh",
        "-c",
        _script(root, user),
        network="host",
        binds={checkout: "/src", CA_BUNDLE: "/etc/ssl/bake-machine-ca.crt"},
        env={"PIP_CERT": "/etc/ssl/bake-machine-ca.crt", "DEBIAN_FRONTEND": "noninteractive"},
        timeout=800,
    )
    assert proc.returncode == 0, (
        f"{BASES[base]}: exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )
    assert "bake " in proc.stdout, proc.stdout[-2000:]  # `bake --version` answered
