"""Checks of the built sites and the committed notebooks (run by `make docs` after both builds; the tests run
the same functions on the committed notebooks).

    python docs/_ext/site_check.py --student docs/_build/student --instructor docs/_build/instructor

Student site: no solution code (the `# BEGIN SOLUTION` markers, the tutorials' marked solution lines, the
marked formulas, and the bodies of reluattn's own answers that the checkers refuse). Both sites: no absolute
path of the build machine (/work/, /root/, /home/, /tmp/, /Users/). HTML is read as text: tags removed and
entities decoded, so code split into highlighting spans reads as it was typed.
"""

from __future__ import annotations

import argparse
import html
import importlib.util
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MACHINE_PATH = re.compile(r"(?<![\w.~/-])/(?:work|root|home|tmp|Users)/[\w.-]+")
TEXT_SUFFIXES = (".html", ".txt", ".js", ".ipynb", ".md")


def machine_paths(text: str) -> list[str]:
    """The absolute machine paths in `text` (e.g. "/work/main", "/tmp/ipykernel_12"), in order."""
    return MACHINE_PATH.findall(text)


def page_text(path: Path) -> str:
    """A built file as text: for HTML, its tags removed and its entities decoded."""
    text = path.read_text(encoding="utf-8", errors="replace")
    return html.unescape(re.sub(r"<[^>]+>", "", text)) if path.suffix == ".html" else text


def make_exercises():
    spec = importlib.util.spec_from_file_location("make_exercises", ROOT / "tutorials" / "make_exercises.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def site_files(site: Path) -> list[Path]:
    return sorted(path for path in site.rglob("*") if path.is_file() and path.suffix in TEXT_SUFFIXES)


def problems(student: Path | None, instructor: Path | None) -> list[str]:
    """Every leak of a solution into the student site and every machine path in either site."""
    found = []
    if student is not None:
        forbidden = make_exercises().solution_lines()
        for path in site_files(student):
            text = page_text(path)
            found += [f"{path}: solution line {line!r}" for line in forbidden if line in text]
    for site in filter(None, (student, instructor)):
        for path in site_files(site):
            found += [f"{path}: machine path {hit}" for hit in dict.fromkeys(machine_paths(page_text(path)))]
    return found


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--student", type=Path, help="the built student site")
    parser.add_argument("--instructor", type=Path, help="the built instructor site")
    args = parser.parse_args(argv)
    for site in filter(None, (args.student, args.instructor)):
        if not (site / "index.html").exists():
            print(f"{site} holds no built site (index.html)")
            return 2
    found = problems(args.student, args.instructor)
    for problem in found[:50]:
        print(problem)
    print(f"site check: {len(found)} problem{'' if len(found) == 1 else 's'}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
