"""Make the landing page's figure from a measurement with reluattn's NumPy backend (notebook 01, §2-4):

    python docs/figures/make_figures.py        # writes docs/figures/row_sums_and_variance.png (about 10 s)

Left: the row sum of the attention weights against the number of keys L, for unit-variance scores:
softmax's is 1, relu's grows like L / sqrt(2 pi), relu / L's stays at 1 / sqrt(2 pi). Right: the variance
of the attention output for unit-variance values: relu / L and softmax shrink it like 1/L, ReLUFormer's
relu / sqrt(L/2) keeps it at 1. Points are measured, lines are the formulas.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

import reluattn as ra  # noqa: E402
from reluattn import palette  # noqa: E402
from reluattn.numpy_backend import attention_weights  # noqa: E402

OUTPUT = Path(__file__).resolve().parent / "row_sums_and_variance.png"
E_RELU = 1.0 / math.sqrt(2.0 * math.pi)


def main() -> Path:
    rng = np.random.default_rng(0)
    nb = ra.backend("numpy")
    lengths = 2 ** np.arange(4, 13)  # L = 16 ... 4096
    kinds = {"softmax": ra.AttentionConfig(kind="softmax"), "relu (no length factor)": ra.AttentionConfig(alpha=0.0),
             "relu / L": ra.AttentionConfig(alpha=1.0)}
    row_sums = {name: [] for name in kinds}
    for num_keys in lengths:
        scores = rng.normal(size=(max(64, 2 ** 18 // num_keys), num_keys))  # (rows, L), ~N(0, 1)
        for name, attn_cfg in kinds.items():
            row_sums[name].append(attention_weights.attention_weights_forward(scores, attn_cfg)[0].sum(-1).mean())
    variants = {"relu / L": ra.AttentionConfig(alpha=1.0), "softmax": ra.AttentionConfig(kind="softmax"),
                "ReLUFormer, relu / sqrt(L/2)": ra.AttentionConfig(alpha=0.5, scale=math.sqrt(2.0))}
    variance_lengths = lengths[lengths <= 1024]
    variances = {name: [] for name in variants}
    for num_keys in variance_lengths:
        q, k, v = rng.normal(size=(3, 8192 // num_keys, num_keys, 4, 32)).astype(np.float32)  # (B, L, H, Dh)
        for name, attn_cfg in variants.items():
            variances[name].append(nb.attention(q, k, v, attn_cfg).var())

    figure = Figure(figsize=(10, 3.8))
    left, right = figure.subplots(1, 2)
    # One palette style per variant (reluattn.palette): its colour and marker on the measured points, its colour
    # and line style on the formula's line, so that no two variants differ by colour alone.
    styles = {name: palette.series(index) for index, name in enumerate(
        ("relu / L", "softmax", "relu (no length factor)", "ReLUFormer, relu / sqrt(L/2)"))}
    predicted_sums = {"softmax": np.ones(len(lengths)), "relu (no length factor)": E_RELU * lengths,
                      "relu / L": np.full(len(lengths), E_RELU)}
    for name in kinds:
        left.plot(lengths, row_sums[name], label=name, **{**styles[name], "linestyle": "none"})
        left.plot(lengths, predicted_sums[name], lw=1, **{**styles[name], "marker": "none"})
    predicted_variance = {"relu / L": 1 / (2 * variance_lengths), "softmax": math.e / variance_lengths,
                          "ReLUFormer, relu / sqrt(L/2)": np.ones(len(variance_lengths))}
    for name in variants:
        right.plot(variance_lengths, variances[name], label=name, **{**styles[name], "linestyle": "none"})
        right.plot(variance_lengths, predicted_variance[name], lw=1, **{**styles[name], "marker": "none"})
    left.set(title="row sum of the attention weights", ylabel="row sum")
    right.set(title="variance of the attention output", ylabel="Var(output)")
    for axes, measured in ((left, lengths), (right, variance_lengths)):
        axes.set_xscale("log", base=2)
        axes.set_yscale("log")
        axes.set_xticks(measured, [str(int(L)) for L in measured])
        axes.minorticks_off()
        axes.set_xlabel("keys $L$ (log scale)")
        axes.grid(alpha=0.3)
        axes.legend(fontsize=8)
    figure.suptitle("points: measured with reluattn's NumPy backend (unit-variance scores and values); "
                    "lines: the formulas", fontsize=9)
    figure.tight_layout()
    temporary = OUTPUT.with_name(f".{OUTPUT.name}.tmp")
    figure.savefig(temporary, format="png", dpi=110)
    os.replace(temporary, OUTPUT)
    return OUTPUT


if __name__ == "__main__":
    print("wrote", main())
