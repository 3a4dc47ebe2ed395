"""Checks of the built sites and the committed notebooks (run by `make docs` after both builds; the tests run
the same functions on the committed notebooks).

    python docs/_ext/site_check.py --student docs/_build/student --instructor docs/_build/instructor

Student site: no solution code (the `# BEGIN SOLUTION` markers, the tutorials' marked solution lines, the
marked formulas, and the bodies of reluattn's own answers that the checkers refuse). Both sites: no absolute
path of the build machine (/work/, /root/, /home/, /tmp/, /Users/), and each tutorial page links its
notebooks for download (the student site the exercise version, the instructor's both versions). HTML is
read as text: tags removed and entities decoded, so code split into highlighting spans reads as it was
typed; a notebook is read as its cells' sources and the text of their outputs (printed lines, errors, text
results), not the images' data.
"""

from __future__ import annotations

import argparse
import html
import importlib.util
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MACHINE_PATH = re.compile(r"(?<![\w.~/-])/(?:work|root|home|tmp|Users)/[\w.-]+")
TEXT_SUFFIXES = (".html", ".txt", ".js", ".ipynb", ".md")
TEXT_OUTPUTS = ("text/plain", "text/html", "text/markdown", "text/latex")


def machine_paths(text: str) -> list[str]:
    """The absolute machine paths in `text` (e.g. "/work/main", "/tmp/ipykernel_12"), in order."""
    return MACHINE_PATH.findall(text)


def joined(part) -> str:
    """A notebook's multi-line string, stored as one string or as a list of lines."""
    return part if isinstance(part, str) else "".join(part)


def notebook_text(text: str) -> str:
    """A notebook (its JSON) as the text a reader sees: every cell's source and its outputs' text (printed
    streams, tracebacks, text results), leaving out the base64 data of images, which can spell anything."""
    parts = []
    for cell in json.loads(text)["cells"]:
        parts.append(joined(cell["source"]))
        for output in cell.get("outputs", []):
            parts += [joined(output.get("text", "")), *output.get("traceback", [])]
            parts += [joined(output.get("data", {}).get(kind, "")) for kind in TEXT_OUTPUTS]
    return "\n".join(parts)


def page_text(path: Path) -> str:
    """A built or committed file as text: for HTML, its tags removed and its entities decoded; for a notebook
    (or a site's copy of one, NAME.ipynb.txt), its notebook_text."""
    text = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix == ".html":
        return html.unescape(re.sub(r"<[^>]+>", "", text))
    return notebook_text(text) if path.name.endswith((".ipynb", ".ipynb.txt")) else text


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
    for site, wanted in ((student, 1), (instructor, 2)):
        found += notebook_link_problems(site, wanted) if site is not None else []
    return found


def notebook_link_problems(site: Path, wanted: int) -> list[str]:
    """Each tutorial page's download links (docs/conf.py, notebook_links): `wanted` notebooks of its name
    (the student site: the exercise version; the instructor's: the tutorial and its exercise version), each
    a file of the site."""
    found = []
    for page in sorted((site / "tutorials").glob("[0-9][0-9]_*.html")):
        block = re.search(r'<p class="notebook-links">(.*?)</p>', page.read_text(encoding="utf-8"), flags=re.S)
        targets = re.findall(r'href="([^"]+)"', block.group(1)) if block else []
        good = [t for t in targets if t.endswith(f"/{page.stem}.ipynb") and (page.parent / t).resolve().is_file()]
        if len(good) != wanted:
            found.append(f"{page}: {len(good)} download links to its notebook, not {wanted}")
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
