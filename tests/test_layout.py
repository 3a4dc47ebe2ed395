"""The package's shape: the two backends list the same files, no reluattn module imports another in a
cycle, packages import only downward (no two reach each other), nothing in numpy_backend reaches JAX,
directly or through the reluattn modules it imports, the course graders and the test kit load no trainer,
and importing a module changes no process-wide setting.

Imports are read from the source (ast), module level and inside functions alike, so a lazy import that
closes a cycle counts too."""

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "reluattn"
JAX_ONLY = {"sharding.py"}  # data parallelism; NumPy has no devices to spread over


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set:
    """The absolute names of every module `path` imports (relative imports resolved)."""
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")
            base = base[:len(base) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            names.add(target)
            names.update(f"{target}.{alias.name}" for alias in node.names)  # `from . import module`
    return names


def graph() -> dict:
    modules = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    return {name: {imported for imported in imports_of(path) if imported in modules}
            | {imported for imported in imports_of(path) if imported.split(".")[0] != "reluattn"}
            for name, path in modules.items()}


def test_the_backends_list_the_same_files():
    numpy_files = {path.name for path in (PACKAGE / "numpy_backend").glob("*.py")}
    jax_files = {path.name for path in (PACKAGE / "jax_backend").glob("*.py")}
    assert jax_files - JAX_ONLY == numpy_files
    assert {"layers.py", "attention_weights.py", "multihead_attention.py", "mlp.py", "model.py", "optim.py",
            "long_sequences.py"} <= numpy_files


def test_no_import_cycle():
    edges = {name: {i for i in imported if i.startswith("reluattn")} for name, imported in graph().items()}
    # A package imports its own submodules (`from . import x`), which is not a cycle of dependencies:
    # only count edges out of a package's __init__ into modules outside it.
    state, cycles = {}, []

    def visit(name, path):
        state[name] = "open"
        for child in sorted(edges.get(name, ())):
            if child == name or child.startswith(name + "."):
                continue
            if state.get(child) == "open":
                cycles.append(path[path.index(child):] + [child] if child in path else path + [child])
            elif child not in state:
                visit(child, path + [child])
        state[name] = "done"

    for name in sorted(edges):
        if name not in state:
            visit(name, [name])
    assert cycles == [], "import cycles: " + "; ".join(" -> ".join(cycle) for cycle in cycles)


def test_numpy_backend_reaches_no_jax():
    edges = graph()
    for start in [name for name in edges if name.startswith("reluattn.numpy_backend")]:
        seen, todo = set(), [start]
        while todo:
            name = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            assert name.split(".")[0] not in ("jax", "jaxlib", "optax") and not name.startswith(
                "reluattn.jax_backend"), f"{start} reaches {name}"
            todo.extend(edges.get(name, ()))


def test_the_cycle_check_finds_a_cycle(tmp_path, monkeypatch):
    # The checker itself: two modules that import each other are reported.
    package = tmp_path / "reluattn"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from . import b\n")
    (package / "b.py").write_text("def f():\n    from .a import g\n")
    monkeypatch.setattr(__import__(__name__), "PACKAGE", package)
    try:
        test_no_import_cycle()
    except AssertionError as error:
        assert "reluattn.a -> reluattn.b -> reluattn.a" in str(error)
    else:
        raise AssertionError("the cycle a -> b -> a was not found")


def package_of(module: str) -> str:
    """The node of the package graph: reluattn.X for a subpackage X (and all below it) or a top-level module X."""
    return ".".join(module.split(".")[:2])


def package_edges() -> dict:
    """Which packages of reluattn import which. Edges into the root `reluattn` are left out: importing any
    submodule runs reluattn/__init__.py anyway, and that file imports the backends only inside backend()."""
    edges = {}
    for name, imported in graph().items():
        for other in imported:
            if other.startswith("reluattn.") and package_of(other) != package_of(name):
                edges.setdefault(package_of(name), set()).add(package_of(other))
    return edges


def test_packages_import_only_downward():
    # No two packages import each other, directly or through a chain (training -> grading -> training was one).
    edges = package_edges()

    def reachable(start):
        seen, todo = set(), list(edges.get(start, ()))
        while todo:
            name = todo.pop()
            if name not in seen:
                seen.add(name)
                todo.extend(edges.get(name, ()))
        return seen

    loops = sorted(name for name in edges if name in reachable(name))
    assert loops == [], "packages that reach themselves through others: " + ", ".join(
        f"{name} -> {sorted(edges[name])}" for name in loops)


def test_the_package_check_finds_a_loop(tmp_path, monkeypatch):
    # The checker itself: two packages whose modules import each other (not each other's same module).
    package = tmp_path / "reluattn"
    for folder in ("a", "b"):
        (package / folder).mkdir(parents=True)
        (package / folder / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "a" / "x.py").write_text("from ..b.y import f\n")
    (package / "b" / "y.py").write_text("def f():\n    pass\n")
    (package / "b" / "z.py").write_text("from ..a import x\n")
    monkeypatch.setattr(__import__(__name__), "PACKAGE", package)
    try:
        test_packages_import_only_downward()
    except AssertionError as error:
        assert "reluattn.a" in str(error) and "reluattn.b" in str(error)
    else:
        raise AssertionError("the loop reluattn.a <-> reluattn.b was not found")


def run_python(code: str) -> str:
    """`code` run in a fresh interpreter (imports are measured from a clean sys.modules); its stdout."""
    environment = {key: value for key, value in os.environ.items() if key != "MPLBACKEND"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=environment,
                            cwd=PACKAGE.parent, timeout=600)
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.parametrize("package", ["reluattn.grading", "reluattn.testing"])
def test_the_course_and_test_kits_load_no_trainer(package):
    loaded = json.loads(run_python(f"import json, sys\nimport {package}\n"
                                   "print(json.dumps(sorted(m for m in sys.modules if m.startswith('reluattn.'))))"))
    assert [name for name in loaded if name.startswith("reluattn.training")] == [], loaded
    assert package in loaded  # the import itself did run


def test_importing_every_module_changes_no_process_setting():
    # reluattn/__init__.py promises that importing a module sets nothing process-wide: not matplotlib's
    # backend, not the environment, not NumPy's error handling, not JAX's precision.
    modules = sorted(module_name(path) for path in PACKAGE.rglob("*.py") if path.name != "__main__.py")
    code = f"""
import importlib, json, os
import matplotlib, numpy, jax
matplotlib.use("svg")
before = (matplotlib.get_backend(), dict(os.environ), numpy.geterr(), bool(jax.config.jax_enable_x64))
for name in {modules!r}:
    importlib.import_module(name)
after = (matplotlib.get_backend(), dict(os.environ), numpy.geterr(), bool(jax.config.jax_enable_x64))
print(json.dumps([before == after, [str(value) for value in before], [str(value) for value in after]]))
"""
    same, before, after = json.loads(run_python(code).splitlines()[-1])
    changed = [(b, a) for b, a in zip(before, after) if b != a]
    assert same, f"importing reluattn's modules changed process state (before, after): {changed}"
