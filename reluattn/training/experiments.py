"""The reproduction study's experiments: named grids of `reluattn train` runs, one per claim of the papers.

    reluattn sweep alpha-sweep --scale cpu --seeds 2 --data PATH --out sweeps/alpha-sweep

An experiment is a list of cells; a cell is one model/recipe (a set of `reluattn train` flags) and its grid
coordinates ("kind", "alpha", "tokens", ...), trained once per seed. A scale sets what every cell shares:

    smoke   a few steps on a few hundred images with a tiny model: for tests and for trying the machinery
            (every experiment in well under a minute per cell);
    cpu     a 2-core CPU: sized for <= 90 minutes per experiment with 2 seeds; one 2-core AMD EPYC did not
            meet that, a faster one did (arithmetic below);
    gpu     one GPU: the full 45,000 training images, wider models, longer runs.

CPU budget arithmetic (2-core CPU). The cpu base model is ViT 64 wide, 4 deep, 2 heads, MLP 128, batch 128,
trained 4 epochs on 20,000 images (625 steps) with 5,000 held out. The grids were first sized from the
reproduction issue's figure (a 65-token run in about 50 s on a 2-core AMD EPYC) and came out at <= 90 minutes
per experiment with 2 seeds. MEASURED since (each sweep's results table records every run's wall time), on
two 2-core "AMD EPYC" KVM guests that differ several-fold in speed, so name the run beside the figure:
    earlier machine, 2026-11-26 15:22: a 17-token run took 64-70 s with nothing else running (and 100-540 s
        while other jobs shared the cores); at that rate alpha-sweep's 62 17-token runs alone need ~70 min.
    later machine, 2026-11-26 21:39-22:21, nothing else running: 65-token cpu runs 36-48 s; scaling 16-20 s,
        38-46 s and 87-97 s for its three sizes (all 12 runs in 11 min); long-sequence 8-11 s, 18-21 s and
        115-216 s at 17, 65 and 257 tokens (all 24 runs in 26 min); learned-alpha's six 65-token runs 4 min.
Per experiment, 2 seeds (runs; the first estimates kept for comparison):
    alpha-sweep      62 cells (6 h x 5 alpha x 2 lengths + softmax x 2) x 2 = 124 runs; first estimate ~85 min
                     (measured on the later machine: 17-token runs 16-21 s, the 62 65-token runs 35-51 s
                     each, 46 min in all, 2026-11-27; the 17-token half ~20 min at that rate)
    scaling          3 sizes x 2 kinds x 2 = 12 runs; widths 48/64/96 span ~10x FLOPs per image; ~35 min
                     (measured 11 min on the later machine)
    qk-norm-and-gate 16 cells + softmax = 17 x 2 = 34 runs; ~37 min
    kv-memory        3 activations x 5 widths (64 ... 1024) x 2 = 30 runs; ~40 min
    long-sequence    4 methods x 3 lengths (17, 65, 257 tokens) x 2 = 24 runs at 3 epochs on 10,000 images;
                     257 tokens costs ~5x 65; ~60 min (measured 26 min on the later machine; 257 tokens cost
                     6-10x 65 there)
    learned-alpha    3 starts x 2 lengths x 2 = 12 runs; ~10 min (measured: the six 17-token runs took
                     106-261 s each on the shared earlier machine, the six 65-token runs 36-48 s on the later one)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

SCALES = ("smoke", "cpu", "gpu")

# Flags every cell of a scale shares (a cell's own flags override them).
SCALE_FLAGS = {
    "smoke": {"--subset": 256, "--val-split": 128, "--steps": 3, "--warmup-steps": 0, "--batch-size": 32,
              "--dim": 16, "--depth": 1, "--heads": 2, "--mlp-dim": 32, "--compute-dtype": "float32",
              "--log-every": 1, "--checkpoint-every": 1},
    "cpu": {"--subset": 20000, "--val-split": 5000, "--epochs": 4, "--warmup-epochs": 0.5, "--batch-size": 128,
            "--dim": 64, "--depth": 4, "--heads": 2, "--mlp-dim": 128, "--compute-dtype": "bfloat16",
            "--label-smoothing": 0.1, "--lr": 2e-3},
    "gpu": {"--val-split": 5000, "--epochs": 50, "--warmup-epochs": 2.0, "--batch-size": 256,
            "--dim": 192, "--depth": 6, "--heads": 3, "--mlp-dim": 384, "--compute-dtype": "bfloat16",
            "--label-smoothing": 0.1, "--lr": 1e-3},
}
# Every cell runs through the same preset, so a preset's later change moves no sweep silently.
BASE_PRESET = "cpu-small"
FEWSHOT_SHOTS = 10  # shots per class of the linear probe, as Wortsman et al.'s 10-shot transfer


@dataclass(frozen=True)
class Cell:
    """One model/recipe of a grid: its folder name, its grid coordinates and its `reluattn train` flags."""
    name: str
    labels: dict
    flags: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Experiment:
    name: str
    claim: str             # the paper's claim the experiment tests, in one sentence
    source: str            # where the claim comes from
    grid: object           # grid(scale) -> list[Cell]
    figure: str            # which figure report.py draws: "alpha", "flops", "bars", "slots", "length", "learned"
    fewshot: bool = False  # also run `reluattn evaluate --fewshot` on each finished cell


def _tokens_flags(tokens: int, scale: str) -> dict:
    """Patch size (and image size) that give `tokens` tokens with the class token, on 32x32 CIFAR images."""
    patch = {17: 8, 65: 4, 257: 2}.get(tokens)
    if patch is None:
        raise ValueError(f"no patch size gives {tokens} tokens on 32x32 images")
    if scale == "smoke" and patch == 2:  # keep smoke fast: 257 tokens becomes 65
        patch = 4
    return {"--patch-size": patch}


def _alpha_name(alpha: float) -> str:
    return f"{alpha:g}".replace(".", "p")


ALPHA_SWEEP_KINDS = ("relu", "relu2", "gelu", "softplus", "sigmoid", "identity")  # the h of Wortsman et al.'s Fig. 2


def _alpha_sweep(scale):
    cells = []
    for tokens in (17, 65):
        geometry = _tokens_flags(tokens, scale)
        cells.append(Cell(f"t{tokens}-softmax", {"tokens": tokens, "kind": "softmax", "alpha": None},
                          {**geometry, "--attention": "softmax"}))
        for kind in ALPHA_SWEEP_KINDS:
            for alpha in (0.0, 0.5, 1.0, 1.5, 2.0):
                cells.append(Cell(f"t{tokens}-{kind}-a{_alpha_name(alpha)}",
                                  {"tokens": tokens, "kind": kind, "alpha": alpha},
                                  {**geometry, "--attention": kind, "--alpha": alpha}))
    return cells


SCALING_LADDER = {  # (dim, depth, heads, mlp_dim): three sizes spanning about ten times the FLOPs
    "smoke": [(8, 1, 2, 16), (16, 1, 2, 32), (16, 2, 2, 32)],
    "cpu": [(48, 2, 2, 96), (64, 4, 2, 128), (96, 6, 3, 192)],
    "gpu": [(128, 6, 2, 256), (192, 8, 3, 384), (256, 12, 4, 512)],
}


def _scaling(scale):
    cells = []
    for dim, depth, heads, mlp in SCALING_LADDER[scale]:
        size = {"--dim": dim, "--depth": depth, "--heads": heads, "--mlp-dim": mlp}
        for kind in ("softmax", "relu"):
            cells.append(Cell(f"d{dim}x{depth}-{kind}", {"dim": dim, "depth": depth, "kind": kind,
                                                        "alpha": 1.0 if kind == "relu" else None},
                              {**size, "--attention": kind, "--alpha": 1.0}))
    return cells


def _qk_norm_and_gate(scale):
    cells = [Cell("softmax", {"kind": "softmax", "alpha": None, "qk_norm": False, "gated": False},
                  {"--attention": "softmax"})]
    for kind in ("relu", "relu2"):
        for alpha in (0.0, 1.0):
            for qk_norm in (False, True):
                for gated in (False, True):
                    name = f"{kind}-a{_alpha_name(alpha)}{'-qknorm' if qk_norm else ''}{'-gate' if gated else ''}"
                    cells.append(Cell(name, {"kind": kind, "alpha": alpha, "qk_norm": qk_norm, "gated": gated},
                                      {"--attention": kind, "--alpha": alpha,
                                       "--qk-norm" if qk_norm else "--no-qk-norm": True,
                                       "--gated" if gated else "--no-gated": True}))
    return cells


def _kv_memory(scale):
    widths = {"smoke": (16, 32), "cpu": (64, 128, 256, 512, 1024), "gpu": (64, 256, 1024, 2048, 4096)}[scale]
    cells = []
    for activation in ("relu", "softmax", "softmax_ln"):
        for width in widths:
            # Softmax attention keeps the attention side standard: the question is the FFN's read-out.
            cells.append(Cell(f"{activation}-m{width}", {"activation": activation, "mlp_dim": width},
                              {"--mlp-activation": activation, "--mlp-dim": width, "--attention": "softmax"}))
    return cells


LONG_SEQUENCE_METHODS = {  # name -> (labels, flags)
    "softmax": {"--attention": "softmax"},
    "relu-over-L": {"--attention": "relu", "--alpha": 1.0},
    # Shen et al.'s scaling read as relu(s) / (gamma sqrt(L/2)) with gamma = 1: alpha = 1/2, scale sqrt 2.
    "relu-over-sqrt-half-L": {"--attention": "relu", "--alpha": 0.5, "--attention-scale": math.sqrt(2)},
    # ... plus their row-sum and entropy regularisers (a secondary reading of the paper; weight 1e-2).
    "reluformer": {"--attention": "relu", "--alpha": 0.5, "--attention-scale": math.sqrt(2),
                   "--attention-reg-weight": 0.01},
}


def _long_sequence(scale):
    lengths = (17, 65, 257, 1025) if scale == "gpu" else (17, 65, 257)
    cells = []
    for tokens in lengths:
        geometry = ({"--patch-size": 2, "--image-size": 64} if tokens == 1025 else _tokens_flags(tokens, scale))
        extra = {"--subset": 10000, "--epochs": 3} if scale == "cpu" else {}
        for method, flags in LONG_SEQUENCE_METHODS.items():
            cells.append(Cell(f"t{tokens}-{method}", {"tokens": tokens, "method": method},
                              {**geometry, **extra, **flags}))
    return cells


def _learned_alpha(scale):
    cells = []
    for tokens in (17, 65):
        for start in (0.0, 1.0, 2.0):
            cells.append(Cell(f"t{tokens}-from{_alpha_name(start)}", {"tokens": tokens, "alpha_start": start},
                              {**_tokens_flags(tokens, scale), "--attention": "relu", "--alpha": start,
                               "--learn-alpha": True}))
    return cells


EXPERIMENTS = {e.name: e for e in (
    Experiment("alpha-sweep", "Accuracy is typically best near alpha = 1, alpha = 0 is worst, and no "
               "point-wise function h is clearly best.", "Wortsman et al. (2023), Fig. 2", _alpha_sweep, "alpha"),
    Experiment("scaling", "ReLU / L approaches or matches softmax attention as compute grows, in accuracy and "
               "in few-shot transfer.", "Wortsman et al. (2023), Fig. 1", _scaling, "flops", fewshot=True),
    Experiment("qk-norm-and-gate", "qk-layernorm matters little at these scales, and the gate does not "
               "remove the need for the 1/L scaling.", "Wortsman et al. (2023), Figs. 3-4", _qk_norm_and_gate,
               "bars"),
    Experiment("kv-memory", "Seen as a key-value memory, an FFN read out by softmax + LayerNorm is about as "
               "good as relu, and relu pulls ahead when the memory has many slots.",
               "Shen et al. (2023), abstract", _kv_memory, "slots"),
    Experiment("long-sequence", "Softmax attention degrades as sequences get long where relu attention "
               "(scaled, with ReLUFormer's regularisers) does not.",
               "Shen et al. (2023), abstract; the scaling and regularisers are a secondary reading",
               _long_sequence, "length"),
    Experiment("learned-alpha", "Beyond both papers: a per-head learned alpha converges near the best fixed "
               "alpha of the alpha sweep, whatever it starts from.",
               "open question of Wortsman et al. (2023), Sec. 5", _learned_alpha, "learned"),
)}


def cells_of(experiment: str, scale: str) -> list[Cell]:
    """The cells of `experiment` at `scale`, each with the scale's shared flags under its own."""
    if experiment not in EXPERIMENTS:
        raise ValueError(f"unknown experiment {experiment!r}; choose one of {', '.join(EXPERIMENTS)}")
    if scale not in SCALES:
        raise ValueError(f"unknown scale {scale!r}; choose one of {', '.join(SCALES)}")
    cells = EXPERIMENTS[experiment].grid(scale)
    names = [cell.name for cell in cells]
    assert len(names) == len(set(names)), f"{experiment}: duplicate cell names"
    return [Cell(cell.name, cell.labels, {**SCALE_FLAGS[scale], **cell.flags}) for cell in cells]


def train_arguments(cell: Cell, seed: int) -> list[str]:
    """The `reluattn train` arguments of one cell and seed (without --out, --data, --resume)."""
    arguments = ["--preset", BASE_PRESET, "--seed", str(seed), "--no-progress"]
    for flag, value in cell.flags.items():
        if value is True:
            arguments.append(flag)
        elif value is not None and value is not False:
            arguments += [flag, f"{value:g}" if isinstance(value, float) else str(value)]
    return arguments
