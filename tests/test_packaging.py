"""environment.yml stays in step with pyproject.toml; the README keeps its two commands; .ci/run calls them
and builds the docs."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def pyproject_requirements() -> dict:
    """Every requirement of [project].dependencies and of every extra, {name: bound}."""
    text = (ROOT / "pyproject.toml").read_text()
    text = text[text.index("\ndependencies = ["):text.index("[project.scripts]")]
    blocks = re.findall(r"^([a-z][a-z0-9_-]*) = \[(.*?)\]", text, flags=re.S | re.M)
    assert {"dependencies", "dev", "docs", "testing"} <= {name for name, _ in blocks}, [n for n, _ in blocks]
    blocks = [block for _, block in blocks]
    specs = re.findall(r'"([A-Za-z0-9_.\-]+)\s*([<>=!~][^"]*)"', "".join(blocks))
    return {name.lower(): bound.strip() for name, bound in specs}


def environment_requirements() -> dict:
    text = (ROOT / "environment.yml").read_text()
    lines = text.split("dependencies:", 1)[1].splitlines()
    specs = [re.match(r"\s+- ([A-Za-z0-9_.\-]+)\s*([<>=!~].*)?$", line) for line in lines]
    return {m.group(1).lower(): (m.group(2) or "").strip() for m in specs if m and m.group(1) != "pip"}


def test_every_pyproject_dependency_has_a_lower_bound():
    requirements = pyproject_requirements()
    assert {"numpy", "jax", "optax", "matplotlib", "pytest", "hypothesis", "sphinx", "myst-nb"} <= set(requirements)
    for name, bound in requirements.items():
        assert bound.startswith(">="), f"{name} needs a lower bound in pyproject.toml, has {bound!r}"


def test_environment_yml_matches_pyproject():
    python_bound = re.search(r'requires-python = "([^"]+)"', (ROOT / "pyproject.toml").read_text()).group(1)
    environment = environment_requirements()
    assert environment.pop("python") == python_bound
    assert environment == pyproject_requirements()


def test_readme_has_the_two_commands_and_ci_runs_the_test_one():
    readme = (ROOT / "README.md").read_text()
    assert "make train" in readme and "make test" in readme
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_make_docs_builds_with_the_docs_extra_and_ci_runs_it():
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^docs: ", makefile, flags=re.M), "the Makefile needs a docs target"
    assert ".[dev,docs]" in makefile and "-W" in makefile  # warnings are errors
    ci = (ROOT / ".ci" / "run").read_text()
    assert ci.index("make test") < ci.index("make docs")


def test_ci_installs_the_declared_minimums_of_every_runtime_dependency():
    import subprocess
    import sys
    ci = (ROOT / ".ci" / "run").read_text()
    assert ci.index("\nmake test") < ci.index("\n.ci/minimums") < ci.index("\nmake docs")
    pins = subprocess.run([sys.executable, str(ROOT / ".ci" / "minimum_pins.py"), "testing"], check=True,
                          capture_output=True, text=True).stdout.split()
    text = (ROOT / "pyproject.toml").read_text()
    runtime = re.findall(r'"([A-Za-z0-9_.\-]+)>=([^"]+)"', text[text.index("\ndependencies = ["):text.index("]", text.index("\ndependencies = ["))])
    assert {f"{name}=={bound}" for name, bound in runtime} <= set(pins), pins
    assert "jax==0.4.33" in pins and "optax==0.2.5" in pins  # optimization_barrier, optax.tree
