"""The figure of each experiment: mean over seeds, error bars of one standard deviation, softmax as a
reference line (its band one standard deviation wide). Each function takes the report's rows and a PNG path."""

from __future__ import annotations

from matplotlib.figure import Figure  # no pyplot: a Figure draws to a file with no backend switched

from .. import palette
from ..training.files import write_atomically_with
from .statistics import aggregate


def _series(cells: dict, x_key: str, series_key: str, **where) -> dict:
    """{series value: sorted [(x, mean, std)]} over the cells whose labels match `where`."""
    series = {}
    for cell in cells.values():
        labels = cell["labels"]
        if all(labels.get(k) == v for k, v in where.items()) and labels.get(x_key) is not None:
            series.setdefault(labels.get(series_key), []).append((labels[x_key], cell["mean"], cell["std"]))
    return {name: sorted(points) for name, points in series.items()}


def _plot_series(ax, series: dict, label_format="{}", names=None) -> None:
    """One line per series, each with its palette colour, marker and line style (not colour alone); `names`
    (all series of the figure, sorted) keeps a series' style the same in every panel."""
    names = names or sorted(series, key=str)
    for name, points in sorted(series.items(), key=lambda item: str(item[0])):
        xs, means, stds = zip(*points)
        ax.errorbar(xs, means, yerr=stds, capsize=3, label=label_format.format(name),
                    **palette.series(names.index(name)))


def _reference(ax, cells: dict, **where) -> None:
    """Softmax's accuracy as a horizontal line with a one-standard-deviation band."""
    for cell in cells.values():
        labels = cell["labels"]
        if labels.get("kind") == "softmax" and all(labels.get(k) == v for k, v in where.items()):
            ax.axhline(cell["mean"], color=palette.OKABE_ITO["black"], linestyle="--", label=f"softmax (n={cell['n']})")
            ax.axhspan(cell["mean"] - cell["std"], cell["mean"] + cell["std"], color=palette.OKABE_ITO["black"],
                       alpha=0.1)
            return


def _figure(*grid, figsize, **options):
    """(figure, axes) as plt.subplots gives them, on a Figure of its own: nothing global is touched."""
    figure = Figure(figsize=figsize)
    return figure, figure.subplots(*grid, **options)


def _save(fig, path, title: str):
    fig.suptitle(title)
    fig.tight_layout()
    write_atomically_with(path, lambda temporary: fig.savefig(temporary, format="png", dpi=120))
    return path


def _legend(ax) -> None:
    """A legend when something on the axes has a label (matplotlib warns over an empty one)."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)


def _accuracy_axis(ax, value: str, xlabel: str) -> None:
    ax.set_xlabel(xlabel)
    ax.set_ylabel(value.replace("_", " ").replace("val ", "validation "))
    ax.grid(alpha=0.3)


def alpha_figure(rows, path, title, value="best_val_accuracy"):
    cells = aggregate(rows, value)
    lengths = sorted({c["labels"]["tokens"] for c in cells.values() if c["labels"].get("tokens")})
    kinds = sorted({c["labels"]["kind"] for c in cells.values() if c["labels"].get("alpha") is not None}, key=str)
    fig, axes = _figure(1, max(len(lengths), 1), figsize=(6 * max(len(lengths), 1), 4.5), squeeze=False)
    for ax, tokens in zip(axes[0], lengths):
        _plot_series(ax, _series(cells, "alpha", "kind", tokens=tokens), names=kinds)
        _reference(ax, cells, tokens=tokens)
        _accuracy_axis(ax, value, "alpha (weights divided by L^alpha)")
        ax.set_title(f"{tokens} tokens")
        _legend(ax)
    return _save(fig, path, title)


def flops_figure(rows, path, title, value="best_val_accuracy"):
    fig, axes = _figure(1, 2, figsize=(12, 4.5))
    for ax, value, name in ((axes[0], value, value.replace("_", " ").replace("val ", "validation ")),
                            (axes[1], "fewshot_accuracy", "10-shot linear-probe accuracy")):
        flops = {r["cell"]: r["train_flops"] for r in rows if r.get("train_flops")}
        cells = aggregate(rows, value)
        for cell_name, cell in cells.items():
            cell["labels"]["flops"] = flops.get(cell_name)
        _plot_series(ax, _series(cells, "flops", "kind"))
        ax.set_xscale("log")
        ax.set_xlabel("training FLOPs")
        ax.set_ylabel(name)
        ax.grid(alpha=0.3)
        _legend(ax)
    return _save(fig, path, title)


def bars_figure(rows, path, title, value="best_val_accuracy"):
    cells = aggregate(rows, value)
    names = sorted(n for n, c in cells.items() if c["labels"].get("kind") != "softmax")
    fig, ax = _figure(figsize=(max(6, 0.5 * len(names) + 2), 4.5))
    ax.bar(range(len(names)), [cells[n]["mean"] for n in names], yerr=[cells[n]["std"] for n in names],
           capsize=3, color=palette.colour(0))
    ax.set_xticks(range(len(names)), names, rotation=60, ha="right", fontsize=8)
    _reference(ax, cells)
    ax.set_ylabel(value.replace("_", " ").replace("val ", "validation "))
    _legend(ax)
    return _save(fig, path, title)


def slots_figure(rows, path, title, value="best_val_accuracy"):
    cells = aggregate(rows, value)
    fig, ax = _figure(figsize=(6.5, 4.5))
    _plot_series(ax, _series(cells, "mlp_dim", "activation"))
    ax.set_xscale("log", base=2)
    _accuracy_axis(ax, value, "MLP width = memory slots")
    _legend(ax)
    return _save(fig, path, title)


def length_figure(rows, path, title, value="best_val_accuracy"):
    fig, axes = _figure(1, 2, figsize=(12, 4.5))
    _plot_series(axes[0], _series(aggregate(rows, value), "tokens", "method"))
    _accuracy_axis(axes[0], value, "tokens (L)")
    entropy = aggregate(rows, "attention_entropy_ratio")
    _plot_series(axes[1], _series(entropy, "tokens", "method"))
    axes[1].set_xlabel("tokens (L)")
    axes[1].set_ylabel("attention entropy / log L (last validation)")
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.grid(alpha=0.3)
        _legend(ax)
    return _save(fig, path, title)


def learned_figure(rows, path, title, value="best_val_accuracy"):
    fig, axes = _figure(1, 2, figsize=(12, 4.5))
    _plot_series(axes[0], _series(aggregate(rows, "learned_alpha_mean"), "alpha_start", "tokens"),
                 "{} tokens")
    axes[0].plot([0, 2], [0, 2], color=palette.REFERENCE, linestyle=":", label="no change")
    axes[0].set_xlabel("alpha at initialisation")
    axes[0].set_ylabel("learned alpha, mean over layers and heads")
    _plot_series(axes[1], _series(aggregate(rows, value), "alpha_start", "tokens"), "{} tokens")
    _accuracy_axis(axes[1], value, "alpha at initialisation")
    for ax in axes:
        ax.grid(alpha=0.3)
        _legend(ax)
    return _save(fig, path, title)


def lr_figure(rows, path, title, value="best_val_accuracy"):
    """Validation accuracy against the peak learning rate, one line per attention kind (the lr-grid) or per
    model size and kind (the scaling-lr-grid)."""
    fig, ax = _figure(figsize=(6.5, 4.5))
    cells = aggregate(rows, "best_val_accuracy")
    for cell in cells.values():
        labels = cell["labels"]
        labels["line"] = labels["kind"] if labels.get("dim") is None else \
            f"{labels['dim']} x {labels['depth']} {labels['kind']}"
    _plot_series(ax, _series(cells, "lr", "line"))
    ax.set_xscale("log")
    rates = sorted({row["lr"] for row in rows if row.get("lr")})
    ax.set_xticks(rates, [f"{rate:g}" for rate in rates])
    ax.minorticks_off()
    _accuracy_axis(ax, "best_val_accuracy", "peak learning rate")
    _legend(ax)
    return _save(fig, path, title)


FIGURES = {"lr": lr_figure, "alpha": alpha_figure, "flops": flops_figure, "bars": bars_figure, "slots": slots_figure,
           "length": length_figure, "learned": learned_figure}
