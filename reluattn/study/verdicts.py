"""Each planned comparison of an experiment, tested on its runs, and the verdict on each claim.

    reluattn sweep EXPERIMENT --report --out DIR     prints them and writes them into results.json

The test (statistics.py): the seed-to-seed spread is pooled over every cell of the experiment, a comparison
"b minus a" gets a pooled t-test (or two one-sided tests for "matches"/"equivalent" claims, against the margin
written with the grid), and the p-values of all the experiment's planned comparisons form one family,
Holm-corrected at 5 %. What each comparison says of its claim:

    expect b>a    supports when b is resolvably ahead; contradicts when resolvably behind
    expect b>=a   contradicts when b is resolvably behind; otherwise consistent (supports when ahead)
    expect equal  supports when equivalence within the margin is shown; contradicts when the 95 % interval
                  of the difference lies wholly outside the margin (statistics.beyond_margin's one-sided
                  p < 2.5 %; that p, Holm-adjusted over the experiment's equivalence comparisons, is reported)

and a claim's verdict follows its rule: "all" (agrees when every comparison supports, partly agrees when
some support and none contradict, disagrees when some contradict and none support), "most" (the paper says "typically": agrees when at most a quarter contradict,
disagrees when more than half do), "none-best" (agrees unless one cell is resolvably ahead of every other
of its length). Anything else is "inconclusive"; a claim whose setting the grid does not reach is "not
tested in the paper's setting" whatever its comparisons say. A claim gets no verdict while any of its
comparisons lacks runs (a cell not run, or run at fewer seeds than the grid plans): the rows show the
interim numbers, marked so, and the verdict waits for the whole design. The Holm family is always the
experiment's whole plan (a comparison not tested yet counts as p = 1), and a claim judged before the rest of
its experiment has run is marked provisional: the pooled spread may still move. Beside the verdicts, the
pooled test's assumption is checked (statistics.spread_check): where a cell's seeds spread resolvably more
than the rest's, its one-to-one comparisons also get Welch's test, which does not pool, as a check.
"""

from __future__ import annotations

import math

from .experiments import EXPERIMENTS, cells_of, default_seeds, planned_comparisons, seeds_of, value_column
from .statistics import (aggregate, beyond_margin, compare, contrast, equivalent, holm, holm_adjusted, pooled_spread,
                         slope, spread_check)

LEVEL = 0.95
PROVISIONAL = " (provisional: other cells of the experiment still lack runs, so its pooled spread may change)"


def _flops(rows: list[dict], cell: str) -> float | None:
    values = [float(r["train_flops"]) for r in rows if r.get("cell") == cell and r.get("train_flops")]
    return sum(values) / len(values) if values else None


def _test(planned, cells, rows, sd, df):
    """The Comparison of one planned comparison (pooled spread), or None when a cell has no runs."""
    if any(name not in cells for name in (*planned.a, *planned.b)):
        return None
    if planned.kind == "slope":
        pairs = [(math.log10(_flops(rows, b)), cells[a]["values"], cells[b]["values"])
                 for a, b in zip(planned.a, planned.b)]
        return slope(pairs, pooled_sd=sd, pooled_df=df, margin=planned.margin, level=LEVEL)
    return contrast([cells[a]["values"] for a in planned.a], [cells[b]["values"] for b in planned.b],
                    pooled_sd=sd, pooled_df=df, margin=planned.margin, level=LEVEL)


def _reading(planned, result, rejected: bool) -> str:
    """supports / contradicts / consistent / unresolved, after the Holm correction."""
    if planned.expect == "equal":
        if rejected:
            return "supports"
        low, high = contrast_interval(result)
        return "contradicts" if low > planned.margin or high < -planned.margin else "unresolved"
    if rejected:
        return "supports" if result.difference > 0 else "contradicts"
    return "consistent" if planned.expect == "b>=a" else "unresolved"


def contrast_interval(result) -> tuple:
    """The 95 % two-sided interval of a result (an equivalence result carries its 90 % one)."""
    if result.margin is None:
        return result.ci
    from scipy import stats
    half = float(stats.t.ppf(0.5 + LEVEL / 2, result.df)) * result.standard_error
    return (result.difference - half, result.difference + half)


def planned_seeds(experiment: str, scale: str) -> dict[str, int]:
    """Each cell's number of seeds in the design: the scale's, or the cell's own where it asks for more."""
    return {cell.name: seeds_of(cell, default_seeds(experiment, scale)) for cell in cells_of(experiment, scale)}


def _verdict(claim, readings: list[str], planned: list, complete: int, designed: int, waiting: str = "") -> str:
    if not readings:  # waiting: why nothing could be tested although some of the claim's cells have runs
        return f"no verdict yet ({waiting})" if waiting else "no runs yet"
    if complete < designed:
        return f"no verdict yet ({complete} of {designed} comparisons have all their planned runs)"
    supports, contradicts = readings.count("supports"), readings.count("contradicts")
    if claim.rule == "none-best":
        verdict = "disagrees" if _clear_best(planned, readings) else "agrees"
    elif claim.rule == "most":
        verdict = ("agrees" if contradicts <= len(readings) / 4 else
                   "disagrees" if contradicts > len(readings) / 2 else "inconclusive")
    elif contradicts and not supports:
        verdict = "disagrees"
    elif supports == len(readings):
        verdict = "equivalent within margin" if planned[0].expect == "equal" else "agrees"
    elif supports and not contradicts:
        verdict = f"partly agrees ({supports} of {len(readings)}; none contradicts)"
    else:
        verdict = "inconclusive"
    return f"not tested in the paper's setting ({verdict} as run)" if claim.scope.startswith("not tested") else verdict


def _clear_best(planned: list, readings: list[str]) -> bool:
    """Whether some cell is resolvably ahead of every other cell it was compared with."""
    wins, opponents = {}, {}
    for p, reading in zip(planned, readings):
        for me, other in ((p.a[0], p.b[0]), (p.b[0], p.a[0])):
            opponents.setdefault(me, set()).add(other)
        if reading in ("supports", "contradicts"):
            winner = p.b[0] if reading == "supports" else p.a[0]
            wins.setdefault(winner, set()).add(p.a[0] if winner == p.b[0] else p.b[0])
    return any(wins.get(cell, set()) == others for cell, others in opponents.items())


# A comparison whose cells have all run, once each: the pooled test has no seed spread to work with yet.
ONE_SEED = "a second seed (one seed a cell so far)"
NO_SPREAD = "one seed a cell so far: no spread to test with"
NOT_ALL_RUN = "some of its cells have not run yet"


def judge(experiment: str, rows: list[dict], scale: str) -> dict:
    """{"value", "pooled_sd", "pooled_df", "comparisons": [...], "claims": [...]} for `experiment`'s runs."""
    value = value_column(scale)
    cells = aggregate(rows, value)
    sd, df = pooled_spread([cell["values"] for cell in cells.values()])
    planned = planned_comparisons(experiment, scale)
    seeds_planned = planned_seeds(experiment, scale)
    results = []
    for claim_index, p in planned:
        entry = {"claim": claim_index, "question": p.question, "a": list(p.a), "b": list(p.b), "expect": p.expect,
                 "margin": p.margin, "kind": p.kind}
        missing = [name for name in (*p.a, *p.b) if name not in cells]
        result = _test(p, cells, rows, sd, df) if sd is not None and not missing else None
        if result is None:
            entry["missing"] = missing or [ONE_SEED]
        else:
            entry.update(result.to_dict(), seeds=[cells[name]["n"] for name in (*p.a, *p.b)])
            short = [f"{name} {cells[name]['n']}/{seeds_planned[name]}" for name in dict.fromkeys((*p.a, *p.b))
                     if cells[name]["n"] < seeds_planned[name]]
            if short:
                entry["short"] = short  # interim: fewer seeds than planned
        results.append(entry)
    # The Holm family is every planned comparison: one not tested yet counts as p = 1, so an interim
    # rejection stays a rejection as the rest of the design arrives.
    family = [r.get("p_value", 1.0) for r in results]
    for entry, rejected, adjusted in zip(results, holm(family, 1 - LEVEL), holm_adjusted(family)):
        if "missing" not in entry:
            entry["p_holm"], entry["rejected"] = adjusted, rejected
    _add_beyond(results)
    check = spread_check({name: cell["values"] for name, cell in cells.items()})
    _add_welch(planned, results, cells, {r["cell"] for r in check if r["differs"]})
    whole = all("missing" not in r and "short" not in r for r in results)
    claims = []
    for index, claim in enumerate(EXPERIMENTS[experiment].claims):
        mine = [(p, r) for (i, p), r in zip(planned, results) if i == index and "missing" not in r]
        readings = [_reading(p, _as_result(r), r["rejected"]) for p, r in mine]
        for (_, r), reading in zip(mine, readings):
            r["reading"] = reading
        designed = sum(1 for i, _ in planned if i == index)
        complete = sum(1 for _, r in mine if "short" not in r)
        claims.append({"quote": claim.quote, "source": claim.source, "rule": claim.rule, "scope": claim.scope,
                       "tested": len(readings), "planned": designed, "complete": complete,
                       "supports": readings.count("supports"), "contradicts": readings.count("contradicts"),
                       "verdict": _verdict(claim, readings, [p for p, _ in mine], complete, designed,
                                           _waiting_for(index, planned, results, cells))
                       + ("" if whole or complete < designed else PROVISIONAL)})
    return {"value": value, "pooled_sd": sd, "pooled_df": df, "level": LEVEL, "comparisons": results,
            "claims": claims, "spread_check": check}


def _add_beyond(results: list) -> None:
    """Beside each equivalence comparison, the one-sided p that its difference lies beyond the margin, and that p
    Holm-adjusted over the experiment's equivalence comparisons (one not tested yet counts as p = 1)."""
    equivalence = [entry for entry in results if entry.get("margin")]
    family = [1.0 if "missing" in entry else beyond_margin(_as_result(entry)) for entry in equivalence]
    for entry, p, adjusted in zip(equivalence, family, holm_adjusted(family)):
        if "missing" not in entry:
            entry["p_beyond"], entry["p_beyond_holm"] = p, adjusted


def _waiting_for(index: int, planned: list, results: list, cells: dict) -> str:
    """Why claim `index` has no tested comparison although some of its cells ran ("" when none ran)."""
    ours = [(p, r) for (i, p), r in zip(planned, results) if i == index]
    if any(r.get("missing") == [ONE_SEED] for _, r in ours):
        return NO_SPREAD
    return NOT_ALL_RUN if any(name in cells for p, _ in ours for name in (*p.a, *p.b)) else ""


def _add_welch(planned, results, cells, noisy: set) -> None:
    """Beside each one-cell-against-one-cell comparison that involves a cell whose seeds spread more than the
    rest's (spread_check), the same test without pooling (Welch): a check on the planned one, not a verdict."""
    for (_, p), entry in zip(planned, results):
        if "missing" in entry or p.kind == "slope" or len(p.a) != 1 or len(p.b) != 1 or not noisy & {*p.a, *p.b}:
            continue
        a, b = cells[p.a[0]]["values"], cells[p.b[0]]["values"]
        if min(len(a), len(b)) < 2:
            continue
        welch = compare(a, b, level=LEVEL) if p.margin is None else equivalent(a, b, p.margin, level=LEVEL)
        entry["welch"] = welch.to_dict()


def _as_result(entry: dict):
    from .statistics import Comparison
    return Comparison(entry["difference"], tuple(entry["ci"]), entry["p_value"], entry["resolved"],
                      entry["standard_error"], entry["df"], tuple(entry["n"]), entry["margin"])


def _beyond(entry: dict) -> str:
    if entry.get("reading") != "contradicts" or "p_beyond" not in entry:
        return ""
    return f"; beyond the margin p {entry['p_beyond']:.3g}, Holm {entry['p_beyond_holm']:.3g}"


def describe(entry: dict) -> str:
    """One line per comparison, in accuracy points: difference, 95 % interval, Holm-adjusted p, reading."""
    if entry.get("missing") == [ONE_SEED]:
        return f"{entry['question']}: not tested yet ({NO_SPREAD})"
    if "missing" in entry:
        return f"{entry['question']}: not tested (no runs of {', '.join(entry['missing'])})"
    low, high = contrast_interval(_as_result(entry))
    margin = f", margin {100 * entry['margin']:g}" if entry.get("margin") else ""
    return (f"{entry['question']}: {100 * entry['difference']:+.2f} points (95% CI {100 * low:+.2f} to "
            f"{100 * high:+.2f}{margin}; p {entry['p_value']:.3g}, Holm {entry['p_holm']:.3g}{_beyond(entry)}; seeds "
            f"{'/'.join(str(n) for n in entry['seeds'])}): {entry.get('reading', '')}"
            + (f" (interim: {', '.join(entry['short'])} seeds)" if entry.get("short") else ""))
