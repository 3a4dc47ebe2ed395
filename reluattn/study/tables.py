"""The verdicts of a sweep as Markdown, written beside its results (verdicts.md): one table per claim with
its quote, each planned comparison's effect, 95 % interval, p-values and seeds, and the claim's verdict.
docs/reproduction.md includes these files, so the page cannot say more than the runs do."""

from __future__ import annotations

from .statistics import beyond_margin
from .verdicts import NO_SPREAD, ONE_SEED, contrast_interval, _as_result

READINGS = {"supports": "supports", "contradicts": "**contradicts**", "consistent": "consistent",
            "unresolved": "unresolved"}


def _points(value: float) -> str:
    return f"{100 * value:+.2f}"


def _row(entry: dict) -> str:
    if entry.get("missing") == [ONE_SEED]:
        return f"| {entry['question']} | {NO_SPREAD} | | | | |"
    if "missing" in entry:
        return f"| {entry['question']} | not run yet | | | | |"
    low, high = contrast_interval(_as_result(entry))
    margin = f" (margin ±{100 * entry['margin']:g})" if entry.get("margin") else ""
    test = "TOST" if entry.get("margin") else "t"
    seeds = "/".join(str(n) for n in entry["seeds"])
    reading = READINGS[entry["reading"]]
    if entry.get("short"):  # a reading before the planned seeds are in is not the calibrated test: no bold
        reading = f"{entry['reading']} so far (interim: fewer seeds than planned, not read)"
    p, p_holm = f"{test} {entry['p_value']:.2g}", f"{entry['p_holm']:.2g}"
    if entry["reading"] == "contradicts" and "p_beyond" in entry:  # the TOST p is near 1 there: say how far out
        p, p_holm = f"{p}; beyond {entry['p_beyond']:.2g}", f"{p_holm}; beyond {entry['p_beyond_holm']:.2g}"
    return (f"| {entry['question']} | {_points(entry['difference'])} [{_points(low)}, {_points(high)}]{margin} | "
            f"{p} | {p_holm} | {seeds} | {reading} |")


def verdicts_markdown(result: dict) -> str:
    """The Markdown of one experiment's verdicts (`result`: write_report's results.json content)."""
    planned, tested = len(result["comparisons"]), sum("p_holm" in c for c in result["comparisons"])
    family = f"{planned} planned comparisons" + ("" if tested == planned else
                                                  f", {tested} run so far and the rest counted as p = 1")
    lines = [] if not result["claims"] else [f"Accuracy judged: `{result['value']}`, in points. Seed spread pooled over the experiment's "
             f"cells: {_spread(result)}. p: two-sided t-test (or TOST against the margin); Holm: adjusted "
             f"within the experiment's {family} (family-wise 5 %)."
             + (" Where a difference lies wholly outside its margin, \"beyond\" is the one-sided p that it lies "
                "beyond the margin (Holm over the experiment's equivalence comparisons)."
                if any(c.get("reading") == "contradicts" and "p_beyond" in c for c in result["comparisons"]) else ""),
             ""]
    lines += _spread_check(result)
    if result.get("exploration"):
        lines += [f"*Exploration, no claim tested:* {result['exploration']}.", ""]
    if result.get("chosen_learning_rates"):
        chosen = ", ".join(f"{kind} {lr:g}" for kind, lr in result["chosen_learning_rates"].items())
        lines += [f"**Learning rates chosen on validation:** {chosen}.", ""]
    if result.get("learning_rates_waiting"):
        waiting = ", ".join(f"{key} ({runs})" for key, runs in result["learning_rates_waiting"].items())
        lines += [f"**Not chosen yet**, until every rate has all its planned seeds: {waiting}.", ""]
    for index, claim in enumerate(result["claims"]):
        lines += [f"**Claim {index + 1}.** \"{claim['quote']}\" — {claim['source']}.", ""]
        if claim["scope"]:
            lines += [f"*Scope:* {claim['scope']}.", ""]
        lines += ["| comparison (b − a) | effect [95 % CI] | p | Holm p | seeds | reading |",
                  "|---|---|---|---|---|---|"]
        lines += [_row(entry) for entry in result["comparisons"] if entry["claim"] == index]
        lines += ["", f"**Verdict: {claim['verdict']}** ({claim['tested']} of {claim['planned']} comparisons "
                      f"tested; rule \"{claim['rule']}\").", ""]
    return "\n".join(lines)


def _spread_check(result: dict) -> list[str]:
    """The paragraph on the pooled test's assumption (one seed spread in every cell), from spread_check."""
    check = result.get("spread_check") or []
    if not check or not result["claims"]:
        return []
    test = f"one-sided F test of each cell's spread against the other cells', Holm over {len(check)} cells"
    noisy = [r for r in check if r["differs"]]
    if not noisy:
        widest = max(check, key=lambda r: r["ratio"])
        return [f"Spread check: no cell's seeds spread resolvably more than the other cells' ({test}; the widest, "
                f"`{widest['cell']}`, {widest['ratio']:.1f}× the rest's), as the pooled test assumes.", ""]
    cells = "; ".join(f"`{r['cell']}` {100 * r['sd']:.2f} points against {100 * r['others_sd']:.2f} (Holm p "
                      f"{r['p_holm']:.2g})" for r in noisy)
    count = "one cell spreads" if len(noisy) == 1 else f"{len(noisy)} cells spread"
    lines = [f"**Spread check:** the pooled test assumes one seed spread in every cell, but {count} "
             f"resolvably more than the rest ({test}): {cells}. The pooled "
             f"intervals of {'its' if len(noisy) == 1 else 'their'} comparisons are too narrow. Welch's test, "
             f"which does not pool (a check beside the planned test; the verdicts stay the planned test's):", ""]
    checked = [entry for entry in result["comparisons"] if entry.get("welch")]
    for entry in checked:
        welch = _as_result({**entry["welch"]})
        low, high = contrast_interval(welch)
        test_name = "TOST" if welch.margin else "t"
        where = ""
        if welch.margin:
            outside = low > welch.margin or high < -welch.margin
            where = (f"; the interval lies wholly outside ±{100 * welch.margin:g} (beyond it: p "
                     f"{beyond_margin(welch):.2g})" if outside else
                     f"; the interval reaches within ±{100 * welch.margin:g}")
        lines.append(f"- {entry['question']}: {_points(welch.difference)} [{_points(low)}, {_points(high)}], "
                     f"{test_name} p {welch.p_value:.2g}, {welch.df:.1f} df{where}")
    if not checked:
        lines.append("- (none of the planned comparisons sets such a cell against a single other cell)")
    return lines + [""]


def _spread(result: dict) -> str:
    if result.get("pooled_sd") is None:
        return "none yet (one seed per cell)"
    return f"{100 * result['pooled_sd']:.2f} points on {result['pooled_df']} degrees of freedom"
