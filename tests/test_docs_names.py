"""README, docs and notebooks name only files and functions that exist: every `reluattn/...` path, every
`reluattn.x.y` dotted name and every `ra.` / `nb.` / `jb.` name they mention is looked up in the code."""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ALIASES = {"ra": "reluattn", "nb": "reluattn.numpy_backend", "jb": "reluattn.jax_backend"}
PATH = re.compile(r"(?<![\w./-])reluattn/[\w/]*[\w](?:\.py)?")
DOTTED = re.compile(r"(?<![\w.])(reluattn(?:\.\w+)+)")
ALIASED = re.compile(r"(?<![\w.])(ra|nb|jb)\.(\w+(?:\.\w+)*)")


def documents() -> list[Path]:
    docs = [p for p in (ROOT / "docs").rglob("*.md")
            if not {"_build", "tutorials", "run-logs"} & set(p.relative_to(ROOT / "docs").parts)]
    return [ROOT / "README.md", ROOT / "tutorials" / "README.md", *docs,
            *sorted((ROOT / "tutorials").rglob("*.ipynb"))]


def text_of(path: Path) -> str:
    if path.suffix == ".ipynb":
        cells = json.loads(path.read_text())["cells"]
        return "\n".join("".join(cell["source"]) for cell in cells)
    return path.read_text()


def resolves(dotted: str) -> bool:
    """Whether `a.b.c` is a module, or an attribute chain of the longest importable module prefix."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for name in parts[cut:]:
                target = getattr(target, name)
        except AttributeError:
            return False
        return True
    return False


def mentions(path: Path):
    text = text_of(path)
    for match in PATH.finditer(text):
        yield "path", match.group(0)
    for match in DOTTED.finditer(text):
        yield "name", match.group(1).rstrip(".")
    for match in ALIASED.finditer(text):
        yield "name", f"{ALIASES[match.group(1)]}.{match.group(2)}"


@pytest.mark.parametrize("path", documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_named_files_and_functions_exist(path):
    missing = set()
    for kind, name in mentions(path):
        if kind == "path":
            exists = (ROOT / name).exists() or (ROOT / f"{name}.py").exists()
        else:
            exists = resolves(name)
        if not exists:
            missing.add(name)
    assert not missing, f"{path.relative_to(ROOT)} names what does not exist: {sorted(missing)}"


def test_the_check_finds_a_stale_name(tmp_path):
    stale = tmp_path / "page.md"
    stale.write_text("See `reluattn/train_jax.py`, `reluattn.presets.PRESETS` and `jb.attention_layer`.\n")
    found = set(mentions(stale))
    assert found == {("path", "reluattn/train_jax.py"), ("name", "reluattn.presets.PRESETS"),
                     ("name", "reluattn.jax_backend.attention_layer")}
    assert not resolves("reluattn.presets.PRESETS") and not resolves("reluattn.jax_backend.attention_layer")
    assert resolves("reluattn.training.presets.PRESETS") and resolves("reluattn.jax_backend.apply")


SPEC_CITATION = re.compile(r"\bSPEC\b")  # a design file that is not part of the project


def project_texts() -> list[Path]:
    """Every file a reader of the project meets: the documents above, the code, the tests and benchmarks."""
    code = [p for folder in ("reluattn", "tests", "benchmarks", "docs/_ext")
            for p in sorted((ROOT / folder).rglob("*.py"))]
    return [*documents(), *code, ROOT / "Makefile", ROOT / "pyproject.toml"]


def test_nothing_cites_a_spec_file_outside_the_project():
    citing = [str(path.relative_to(ROOT)) for path in project_texts()
              if path.resolve() != Path(__file__).resolve() and SPEC_CITATION.search(text_of(path))]
    assert not citing, f"these cite a SPEC file the project does not contain: {citing}"
    assert SPEC_CITATION.search("shapes per SPEC §3") and not SPEC_CITATION.search("RUN_SPECIFIC_COLUMNS")
