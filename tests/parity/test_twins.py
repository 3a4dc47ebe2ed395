"""The NumPy <-> JAX name table (reluattn/twins.py) is complete and true: every name in it exists in the file
it names, and every public name of either backend's files is in it (or is a NumPy cache, which JAX does not
need). A name added to one backend without its twin, or renamed in one, fails here."""

import ast
from pathlib import Path

import pytest

from reluattn import twins

PACKAGE = Path(twins.__file__).parent
BACKENDS = {"numpy": PACKAGE / "numpy_backend", "jax": PACKAGE / "jax_backend"}


def defined_names(path: Path) -> set:
    """The public names a file defines at module level (functions, classes, assignments), read from source."""
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(target.id for target in targets if isinstance(target, ast.Name))
    return {name for name in names if not name.startswith("_")}


def listed(side: str) -> dict:
    """{file: names the table lists for that backend}."""
    table = {}
    for twin in twins.TWINS:
        table.setdefault(twin.file, set()).update(getattr(twin, side))
    return table


@pytest.mark.parametrize("side", ["numpy", "jax"])
def test_every_name_in_the_table_exists(side):
    for file, names in listed(side).items():
        path = BACKENDS[side] / file
        if not names:
            continue
        assert path.is_file(), f"the table names {side}_backend/{file}, which does not exist"
        missing = names - defined_names(path)
        assert not missing, f"reluattn/twins.py lists {sorted(missing)} in {side}_backend/{file}, which has no such name"


@pytest.mark.parametrize("side", ["numpy", "jax"])
def test_every_public_name_is_in_the_table(side):
    table = listed(side)
    for path in sorted(BACKENDS[side].glob("*.py")):
        if path.name == "__init__.py":
            continue
        unlisted = {name for name in defined_names(path) - table.get(path.name, set())
                    if not (side == "numpy" and name.endswith(twins.CACHE_SUFFIX))}
        assert not unlisted, (f"{side}_backend/{path.name} defines {sorted(unlisted)}, not in reluattn/twins.py: "
                              f"add each with its twin, or with why it has none")


def test_a_name_without_its_twin_says_why():
    for twin in twins.TWINS:
        if not (twin.numpy and twin.jax):
            assert twin.why, f"{twin.file}: {twin.numpy or twin.jax} has no twin and the table does not say why"


@pytest.mark.parametrize("side", ["numpy", "jax"])
def test_the_package_exports_resolve(side):
    # What each backend's __init__ exports exists, and its functions are in the table.
    import importlib
    module = importlib.import_module(f"reluattn.{side}_backend")
    everything = set().union(*listed(side).values())
    for name in module.__all__:
        value = getattr(module, name)
        if not isinstance(value, type(module)):
            assert name in everything, f"reluattn.{side}_backend exports {name}, not in reluattn/twins.py"


def test_the_docstring_shows_the_table():
    assert twins.table() in twins.__doc__
    shown = set(twins.table().split())
    for twin in twins.TWINS:
        assert set(twin.numpy + twin.jax) <= shown


@pytest.mark.parametrize("side", ["numpy", "jax"])
def test_every_attention_kind_has_its_h_in_both_backends(side):
    # The registry is config.ATTENTION_KINDS; each backend's POINTWISE holds h of every point-wise kind
    # (softmax and sigmoid_bias are computed apart, in attention_weights.py), so a new kind is never half added.
    import importlib
    from reluattn.config import ATTENTION_KINDS
    pointwise = importlib.import_module(f"reluattn.{side}_backend.attention_weights").POINTWISE
    assert set(pointwise) | {"softmax", "sigmoid_bias"} == set(ATTENTION_KINDS)
