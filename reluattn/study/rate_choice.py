"""The learning rate a selection grid chooses: for each attention kind (the lr-grid) or each model size and kind
(the scaling-lr-grid), the rate with the best mean validation accuracy over seeds, once every rate of it has all
its planned seeds. Test accuracy is never read. `reluattn sweep lr-grid|scaling-lr-grid --report` writes both into
results.json ("chosen_learning_rates", "learning_rates_waiting") and verdicts.md."""

from __future__ import annotations

from .grids import size_key


def _rate_key(labels: dict) -> str:
    return labels["kind"] if labels.get("dim") is None else size_key(labels["dim"], labels["depth"], labels["kind"])


def rates_waiting(cells: dict, design, planned: dict) -> dict:
    """{key: "N of M runs"} for each kind (or size and kind) of a learning-rate grid whose rates do not all have
    their planned seeds yet: a rate chosen from some of the runs could change when the rest come in.
    `design`: the grid's cells; `planned`: {cell: seeds}; `cells`: aggregate() of the finished runs."""
    done, total = {}, {}
    for cell in design:
        key = _rate_key(cell.labels)
        total[key] = total.get(key, 0) + planned[cell.name]
        done[key] = done.get(key, 0) + min(cells.get(cell.name, {}).get("n", 0), planned[cell.name])
    return {key: f"{done[key]} of {total[key]} runs" for key in total if done[key] < total[key]}


def chosen_learning_rates(cells: dict, waiting=()) -> dict:
    """{kind: lr} with the best mean validation accuracy over seeds, from an lr-grid's aggregate() of
    best_val_accuracy (ties: the smaller lr); {"d<dim>x<depth>-<kind>": lr} for the scaling-lr-grid, whose
    cells have a model size. Keys in `waiting` (rates_waiting) are not chosen yet. Only validation is read: the
    test split stays unseen."""
    best = {}
    for cell in cells.values():
        labels = cell["labels"]
        key = _rate_key(labels)
        if key in waiting:
            continue
        if key not in best or (cell["mean"], -labels["lr"]) > (best[key][0], -best[key][1]):
            best[key] = (cell["mean"], labels["lr"])
    return {key: lr for key, (_, lr) in sorted(best.items())}


__all__ = ["chosen_learning_rates", "rates_waiting"]
