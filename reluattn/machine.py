"""What machine this is, in words, for the figures and run records that must name it ("AMD EPYC, 2 cores")."""

from __future__ import annotations

import os
import platform
from pathlib import Path


def cpu_model() -> str:
    """The CPU's model name ("AMD EPYC"), from /proc/cpuinfo where there is one (the benchmarks print it too)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_description() -> str:
    """"AMD EPYC, 2 cores": the CPU model and the core count."""
    return f"{cpu_model()}, {os.cpu_count()} cores"


__all__ = ["cpu_model", "machine_description"]
