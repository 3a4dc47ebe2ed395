"""Pictures: training curves of runs (`reluattn plot`) and attention maps of one image
(`reluattn attention`). Matplotlib's object API with the Agg canvas (no display, no global state);
PNGs are written atomically (a new temporary file, then a rename: files.py).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np

from ..attention_maps import attention_rollout
from .. import palette
from ..config import KINDS_WITHOUT_LENGTH_FACTOR
from .files import write_atomically_with
from .run_dir import METRICS, read_metrics, resolve_checkpoint
from .run_folder import CONFIG


def _save(figure, output) -> Path:
    output = Path(output)
    if output.suffix.lower() != ".png":
        raise ValueError(f"--output must name a .png file, got {output}")
    output.parent.mkdir(parents=True, exist_ok=True)
    # A new temporary (never a planted file or symlink), renamed over `output` once the PNG is complete.
    return write_atomically_with(output, lambda temporary: figure.savefig(temporary, format="png", dpi=120,
                                                                          bbox_inches="tight"))


# --------------------------------------------------------------------------------------- training curves

def run_label(run_dir: Path, name: str | None = None) -> str:
    """The run's name (default: its folder's) and its attention kind, e.g. "relu-run (relu, alpha 1)", from its
    latest checkpoint."""
    name = run_dir.name if name is None else name
    try:
        config = json.loads((resolve_checkpoint(run_dir) / CONFIG).read_text())
        attention = config["model"]["attention"]
        kind = attention["kind"]
        if kind not in KINDS_WITHOUT_LENGTH_FACTOR:  # these ignore alpha
            kind = f"{kind}, alpha {attention['alpha']:g}"
        return _printable(f"{name} ({kind})")
    except (ValueError, OSError, KeyError, TypeError, RecursionError):  # no readable checkpoint: the name alone
        return _printable(name)


def _printable(text: str) -> str:
    """`text` with the bytes of a non-UTF-8 file name (surrogate escapes) shown as U+FFFD, which matplotlib
    can draw."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def run_names(run_dirs) -> list[str]:
    """Each run's folder path relative to the runs' common parent ("alpha-1/seed0" for a sweep's cells, whose
    last folders are alike), or its folder name alone when there is one run."""
    paths = [Path(run).resolve() for run in run_dirs]
    if len(paths) < 2:
        return [path.name for path in paths]
    parent = Path(os.path.commonpath(paths))
    return [str(path.relative_to(parent)) if path != parent else path.name for path in paths]


# The x axes `plot --x` offers: the metrics.jsonl field each reads, and its label.
X_AXES = {"step": ("step", "step"), "epoch": ("epoch", "epoch"), "time": ("time", "wall time (s)")}


def plot_runs(run_dirs, output="curves.png", x="step") -> Path:
    """Train loss and validation accuracy against `x` (step, epoch or time: wall time in s), one palette style
    (colour, line style, marker: reluattn.palette) per run, labelled by its folder path relative to the runs'
    common parent, in one PNG; when the runs logged attention statistics, a second row shows them (each the
    mean over blocks)."""
    if x not in X_AXES:
        raise ValueError(f"--x must be one of {', '.join(X_AXES)}; got {x!r}")
    field, xlabel = X_AXES[x]
    run_dirs, runs = list(run_dirs), []
    for run, name in zip(run_dirs, run_names(run_dirs)):
        run = Path(run)
        if run.name == METRICS and run.is_file():  # the run's metrics.jsonl itself
            run = run.parent
        if not (run / METRICS).is_file():
            raise ValueError(f"{run} has no {METRICS}; pass run directories written by reluattn train (its --out)")
        records = read_metrics(run)
        if not records:
            raise ValueError(f"{run / METRICS} holds no metrics yet; train the run for a few steps first")
        records = [r for r in records if _finite(r.get(field))]  # older logs may lack epoch or time
        runs.append((run_label(run, name), records))
    from matplotlib.figure import Figure  # here: importing plots stays light
    runs = [(label, [r for r in records if isinstance(r.get("attention", {}), dict)]) for label, records in runs]
    with_attention = any("attention" in r for _, records in runs for r in records)
    # constrained: the titles, labels and tick labels of the two rows make room for each other
    figure = Figure(figsize=(11, 8.4 if with_attention else 4.2), layout="constrained")
    if with_attention:  # a second row: the attention statistics of the validation records
        grid = figure.add_gridspec(2, len(ATTENTION_PANELS))
        half = len(ATTENTION_PANELS) // 2
        loss_axes, accuracy_axes = figure.add_subplot(grid[0, :half]), figure.add_subplot(grid[0, half:])
        attention_axes = [figure.add_subplot(grid[1, i]) for i in range(len(ATTENTION_PANELS))]
    else:
        loss_axes, accuracy_axes = figure.subplots(1, 2)
        attention_axes = []
    # Each run its palette colour, line style and marker (the loss curve, dense, without markers).
    styles = [palette.series(i) for i in range(len(runs))]
    for (label, records), style in zip(runs, styles):
        train = [r for r in records if r.get("split") == "train" and _finite(r.get("loss"))]
        held_out = [r for r in records if r.get("split") in ("val", "test") and _finite(r.get("accuracy"))]
        loss_axes.plot([r[field] for r in train], [r["loss"] for r in train], label=label, lw=1.2,
                       **{**style, "marker": "none"})
        accuracy_axes.plot([r[field] for r in held_out], [r["accuracy"] for r in held_out], label=label, ms=3,
                           lw=1.2, **style)
    for axes, (name, title) in zip(attention_axes, ATTENTION_PANELS):
        for (label, records), style in zip(runs, styles):
            measured = [(r[field], _block_mean(r["attention"].get(name))) for r in records if "attention" in r]
            measured = [(step, value) for step, value in measured if value is not None]
            axes.plot([step for step, _ in measured], [value for _, value in measured], label=label, ms=3, lw=1.2,
                      **style)
        axes.set(title=title, xlabel=xlabel)
    loss_axes.set(title="training loss", xlabel=xlabel, ylabel="cross-entropy (with label smoothing)")
    accuracy_axes.set(title="validation accuracy", xlabel=xlabel, ylabel="accuracy")
    if attention_axes:
        attention_axes[0].set_ylabel("mean over blocks, fixed validation batch")
    for axes in (loss_axes, accuracy_axes, *attention_axes):
        axes.grid(alpha=0.3)
        axes.legend(fontsize=8)
    return _save(figure, output)


# The attention statistics `plot` draws (metrics.jsonl's val records, attention_statistics.py), with titles.
ATTENTION_PANELS = (("row_sum_mean", "attention row sum"), ("entropy_ratio", "row entropy / log L"),
                    ("zero_fraction", "fraction of exact zeros"), ("top_share", "share of the top 0.2 %"))


def _block_mean(values):
    """The mean over blocks of one statistic, or None when it was not measured."""
    values = [v for v in (values or []) if _finite(v)]
    return float(np.mean(values)) if values else None


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


# ------------------------------------------------------------------------------------------ attention

def _patch_map(matrix: np.ndarray, pool: str) -> np.ndarray:
    """What the head reads, over the patch grid: the class token's row (cls), or the mean row (gap)."""
    row = matrix[0, 1:] if pool == "cls" else matrix.mean(axis=0)  # (N,)
    side = int(round(math.sqrt(row.size)))
    return row.reshape(side, side)  # (S/P, S/P)


def plot_attention(image: np.ndarray, attention: list, pool: str, output, title: str = "") -> Path:
    """The image, each block's head-averaged attention as a heat map over the patch grid, and the
    rollout. `image` is uint8 (S, S, C); `attention` a list of (H, T, T) arrays, one per block."""
    side = image.shape[0]
    shown = image[..., 0] if image.shape[-1] == 1 else image
    what = ("attention from the class token" if pool == "cls"
            else "attention averaged over query tokens (gap pooling: no class token)")
    panels = [(f"block {i + 1}", _patch_map(np.mean(weights, axis=0), pool)) for i, weights in enumerate(attention)]
    panels.append(("rollout", _patch_map(attention_rollout(attention), pool)))
    columns = min(5, len(panels) + 1)
    rows = math.ceil((len(panels) + 1) / columns)
    from matplotlib.figure import Figure
    figure = Figure(figsize=(2.4 * columns, 2.5 * rows + 0.6))
    axes = np.atleast_1d(figure.subplots(rows, columns)).ravel()
    axes[0].imshow(shown, cmap=palette.GREYSCALE if shown.ndim == 2 else None, interpolation="nearest")
    axes[0].set_title("image", fontsize=9)
    for ax, (name, heat) in zip(axes[1:], panels):
        ax.imshow(shown, cmap=palette.GREYSCALE if shown.ndim == 2 else None, interpolation="nearest")
        ax.imshow(heat, cmap=palette.HEAT, alpha=0.65, interpolation="nearest",
                  extent=(-0.5, side - 0.5, side - 0.5, -0.5))  # the patch grid stretched over the pixels
        ax.set_title(name, fontsize=9)
    for ax in axes:
        ax.set_axis_off()
    what = f"{what}, mean over heads; each map scaled to its own range"
    figure.suptitle(f"{title}\n{what}" if title else what, fontsize=9)
    return _save(figure, output)
