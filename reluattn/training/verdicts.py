"""The comparisons each experiment's verdict rests on, and how they came out.

    reluattn sweep EXPERIMENT --report --out DIR     prints them and writes them into results.json

A comparison is a question about two cells of a grid, answered by the difference of their mean best
validation accuracies over seeds and its Welch standard error (seed_statistics.compare): the difference
counts ("resolved") when it exceeds two standard errors and both cells have at least two seeds. The
comparisons were written down with the grids, before any result was seen; docs/reproduction.md turns
them into the verdicts agrees / disagrees / inconclusive at this scale.
"""

from __future__ import annotations

from .experiments import ALPHA_SWEEP_KINDS, LONG_SEQUENCE_METHODS, SCALING_LADDER, cells_of
from .seed_statistics import aggregate, compare


def _alpha_sweep(names):
    pairs = []
    for tokens in (17, 65):
        for kind in ALPHA_SWEEP_KINDS:
            pairs.append((f"{tokens} tokens, {kind}: alpha 1 minus alpha 0", f"t{tokens}-{kind}-a1",
                          f"t{tokens}-{kind}-a0"))
        pairs.append((f"{tokens} tokens: relu at alpha 1 minus softmax", f"t{tokens}-relu-a1", f"t{tokens}-softmax"))
    return pairs


def _scaling(names, scale):
    return [(f"{dim} wide x {depth} deep: relu / L minus softmax", f"d{dim}x{depth}-relu", f"d{dim}x{depth}-softmax")
            for dim, depth, _, _ in SCALING_LADDER[scale]]


def _qk_norm_and_gate(names):
    pairs = []
    for kind in ("relu", "relu2"):
        pairs.append((f"{kind}, alpha 1: with qk-layernorm minus without", f"{kind}-a1-qknorm", f"{kind}-a1"))
        pairs.append((f"{kind}, gated: alpha 1 minus alpha 0", f"{kind}-a1-gate", f"{kind}-a0-gate"))
        pairs.append((f"{kind}, not gated: alpha 1 minus alpha 0", f"{kind}-a1", f"{kind}-a0"))
    return pairs


def _kv_memory(names):
    widths = sorted({int(name.rsplit("-m", 1)[1]) for name in names})
    pairs = []
    for width in widths:
        pairs.append((f"{width} slots: softmax + LayerNorm minus relu", f"softmax_ln-m{width}", f"relu-m{width}"))
        pairs.append((f"{width} slots: relu minus softmax", f"relu-m{width}", f"softmax-m{width}"))
    return pairs


def _long_sequence(names):
    lengths = sorted({int(name.split("-", 1)[0][1:]) for name in names})
    return [(f"{tokens} tokens: {method} minus softmax", f"t{tokens}-{method}", f"t{tokens}-softmax")
            for tokens in lengths for method in LONG_SEQUENCE_METHODS if method != "softmax"]


def _learned_alpha(names):
    return [(f"{tokens} tokens: learned from alpha {start} minus learned from alpha 1", f"t{tokens}-from{start}",
             f"t{tokens}-from1") for tokens in (17, 65) for start in (0, 2)]


def comparisons(experiment: str, scale: str = "cpu") -> list[tuple[str, str, str]]:
    """(question, cell a, cell b) for every comparison of `experiment` at `scale`: the answer is a - b."""
    names = [cell.name for cell in cells_of(experiment, scale)]
    pairs = {"alpha-sweep": _alpha_sweep, "qk-norm-and-gate": _qk_norm_and_gate, "kv-memory": _kv_memory,
             "long-sequence": _long_sequence, "learned-alpha": _learned_alpha}.get(experiment)
    pairs = pairs(names) if pairs else _scaling(names, scale)
    missing = {cell for _, a, b in pairs for cell in (a, b)} - set(names)
    assert not missing, f"{experiment}: comparisons name cells not in the grid: {sorted(missing)}"
    return pairs


def judge(experiment: str, rows: list[dict], scale: str = "cpu") -> list[dict]:
    """Each comparison of `experiment` on the finished runs in `rows`; cells without runs are marked missing."""
    cells = aggregate(rows)
    results = []
    for question, a, b in comparisons(experiment, scale):
        result = {"question": question, "a": a, "b": b}
        if a in cells and b in cells:
            result.update(compare(cells[a], cells[b]), seeds=(cells[a]["n"], cells[b]["n"]))
        else:
            result["missing"] = [cell for cell in (a, b) if cell not in cells]
        results.append(result)
    return results


def describe(result: dict) -> str:
    """One line per comparison, in accuracy points: the difference, twice its standard error, and the reading."""
    if "missing" in result:
        return f"{result['question']}: no runs yet of {', '.join(result['missing'])}"
    seeds = "/".join(str(n) for n in result["seeds"])
    reading = ("resolved" if result["resolved"] else
               "one seed: no spread, no verdict" if min(result["seeds"]) < 2 else "within two standard errors")
    return (f"{result['question']}: {100 * result['difference']:+.1f} points "
            f"(2 x standard error {200 * result['standard_error']:.1f}; seeds {seeds}): {reading}")
