"""Print pyproject.toml's lower bounds as pip pins: each ">=X" runtime dependency (and those of the extras
named on the command line) as "name==X", on one line, for .ci/minimums. (Plain text matching, no tomllib:
Python 3.10 has none.)"""

import re
import sys
from pathlib import Path

text = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()


def block(name: str) -> str:
    """The body of the TOML array `name = [...]`."""
    match = re.search(rf"^{re.escape(name)} = \[(.*?)^\]", text, flags=re.S | re.M)
    if match is None:
        sys.exit(f"pyproject.toml has no {name} = [...] list")
    return match.group(1)


pins = []
for section in ["dependencies"] + sys.argv[1:]:
    for requirement in re.findall(r'"([^"]+)"', block(section)):
        match = re.fullmatch(r"([A-Za-z0-9_.\-]+)>=([0-9][0-9A-Za-z.]*)", requirement.replace(" ", ""))
        if match is None:
            sys.exit(f"pyproject.toml: {requirement!r} is not 'name>=version'; .ci/minimum_pins.py pins only those")
        pins.append(f"{match[1]}=={match[2]}")
print(" ".join(dict.fromkeys(pins)))
