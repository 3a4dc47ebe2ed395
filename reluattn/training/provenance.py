"""What made a run: the command line, the versions of Python and the numeric packages, the git commit when
reluattn runs from a checkout, and the machine. `reluattn train` writes it into every checkpoint's
config.json and into summary.json, under "provenance" (readers of those files ignore keys they do not know).
"""

from __future__ import annotations

import functools
import os
import platform
import shlex
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from ..machine import cpu_model

PACKAGES = ("numpy", "jax", "jaxlib", "optax", "reluattn")
# The command line to record, set by reluattn.cli.main (which may be called with arguments of its own, not
# sys.argv's); empty: this process's sys.argv.
COMMAND: list[str] = []


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def git_commit() -> str | None:
    """The commit of the checkout reluattn runs from ("<sha>" or "<sha>-dirty"), None when it is no checkout
    (an installed wheel) or git is missing."""
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return None
    try:
        sha = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=10, check=True).stdout.strip()
        changed = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                                 capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{sha}-dirty" if changed else sha


@functools.lru_cache(maxsize=1)
def _static() -> dict:
    import jax  # here: reading the devices starts JAX's backend, which a train run has done already
    versions = {"python": platform.python_version(), **{name: _version(name) for name in PACKAGES}}
    return {"versions": versions, "git_commit": git_commit(),
            "machine": {"cpu": cpu_model(), "cores": os.cpu_count(), "platform": platform.platform(),
                        "devices": [str(device) for device in jax.devices()]}}


def provenance() -> dict:
    """{"command", "versions" {python, numpy, jax, jaxlib, optax, reluattn}, "git_commit", "machine" {cpu,
    cores, platform, devices}} of this process."""
    command = COMMAND or [Path(sys.argv[0]).name] + sys.argv[1:]
    return {"command": shlex.join(command), **_static()}
