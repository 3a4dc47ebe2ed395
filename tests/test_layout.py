"""The package's shape: the two backends list the same files, no reluattn module imports another in a
cycle, and nothing in numpy_backend reaches JAX, directly or through the reluattn modules it imports.

Imports are read from the source (ast), module level and inside functions alike, so a lazy import that
closes a cycle counts too."""

import ast
from pathlib import Path

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
