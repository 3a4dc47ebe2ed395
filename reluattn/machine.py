"""What machine this is, in words, for the figures and run records that must name it
("AMD EPYC (family 25, model 17), 2 cores")."""

from __future__ import annotations

import os
import platform
from pathlib import Path


def cpu_model(cpuinfo: str | Path = "/proc/cpuinfo") -> str:
    """The CPU's model name ("AMD EPYC"), from /proc/cpuinfo where there is one (the benchmarks print it too).

    A virtual machine may report only a family name, with no model number in it ("AMD EPYC"); then the CPU
    family and model numbers are added ("AMD EPYC (family 25, model 17)"), since two such machines can
    differ twofold in speed and the name alone would not tell their runs apart."""
    fields: dict[str, str] = {}
    try:
        for line in Path(cpuinfo).read_text().splitlines():
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())  # the first CPU's lines; every CPU repeats them
    except OSError:
        pass
    name = fields.get("model name")
    if not name:
        return platform.processor() or platform.machine()
    if not any(character.isdigit() for character in name) and fields.get("cpu family") and fields.get("model"):
        name += f" (family {fields['cpu family']}, model {fields['model']})"
    return name


def machine_description() -> str:
    """"AMD EPYC (family 25, model 17), 2 cores": the CPU model and the core count."""
    return f"{cpu_model()}, {os.cpu_count()} cores"


__all__ = ["cpu_model", "machine_description"]
