"""The reproduction study's experiments: one record per experiment holding the papers' sentences it tests,
its grid of `reluattn train` runs, the comparisons planned for each sentence (with their margins) and its
figure. The grids and comparisons themselves are in grids.py, the records in records.py.

    reluattn sweep alpha-sweep --scale cpu --seeds 3 --data PATH --out sweeps/alpha-sweep

A cell is one model/recipe (a set of `reluattn train` flags) and its grid coordinates ("kind", "alpha",
"tokens", ...), trained once per seed. A scale sets what every cell shares:

    smoke   a few steps on a few hundred images with a tiny model: for tests and for trying the machinery.
    pilot   the first study (2026-11-26/27): ViT 64 wide, 4 deep, 4 epochs on 20,000 images, 5,000 held out
            for validation, lr 2e-3 for every kind, 2 seeds; 236 runs, kept in docs/run-logs/pilot/. Too small
            a budget for the question (the models are still learning fast at the end), kept as a pilot.
    cpu     the main study on a 2-core CPU: the same ViT 64 x 4, 10 epochs on the 40,000 training images left
            after holding out 5,000 for validation and 5,000 as a test split nothing is chosen on; each
            attention kind at its own learning rate (LEARNING_RATES, chosen on validation by the lr-grid
            experiment); 3 seeds per cell, 20 for every relu / L-vs-softmax cell. Estimated from the pilot's
            measured speed (a 64x4 run at 65 tokens, 625 steps, took 35-51 s on a quiet 2-core AMD EPYC):
            3,120 steps, about 3-4 min at 65 tokens and 1-1.5 min at 17 tokens per run.
    gpu     the cpu scale's recipe and budget (10 epochs on the same 40,000 images, the same splits, each kind at
            its lr-grid learning rate, 3 seeds, 20 for relu / L vs softmax) on one GPU, where models too large for
            two CPU cores train in seconds: the scaling ladder goes up to ViT 192 x 8. Fixed on 2026-11-27
            before its first run, from one probe of the H200's speed (12 one-epoch 64x4 runs at 65 tokens
            at once: 23 s in all, 12.9 s of training each).

Margins of the equivalence tests ("matches", "equivalent") are fixed here, in accuracy points, before any
run of the scale they judge; the pilot's were written after its runs were seen (say so when quoting them).
"""

from __future__ import annotations

from .grids import ALPHA_SWEEP, KV_MEMORY, LEARNED_ALPHA, LONG_SEQUENCE, LR_SELECTION, QK_NORM_AND_GATE
from .records import DEFAULT_SEEDS, HEADLINE_SEEDS, SCALES, Cell, Planned
from .scaling_grids import SCALING, SCALING_FAST, SCALING_FAST_LR_GRID, SCALING_LR_GRID, SCALING_TUNED

# Flags every cell of a scale shares (a cell's own flags override them).
SCALE_FLAGS = {
    "smoke": {"--subset": 256, "--val-split": 128, "--steps": 3, "--warmup-steps": 0, "--batch-size": 32,
              "--dim": 16, "--depth": 1, "--heads": 2, "--mlp-dim": 32, "--compute-dtype": "float32",
              "--log-every": 1, "--checkpoint-every": 1},
    "pilot": {"--subset": 20000, "--val-split": 5000, "--epochs": 4, "--warmup-epochs": 0.5, "--batch-size": 128,
              "--dim": 64, "--depth": 4, "--heads": 2, "--mlp-dim": 128, "--compute-dtype": "bfloat16",
              "--label-smoothing": 0.1, "--lr": 2e-3},
    "cpu": {"--val-split": 5000, "--test-split": 5000, "--epochs": 10, "--warmup-epochs": 0.5,
            "--batch-size": 128, "--dim": 64, "--depth": 4, "--heads": 2, "--mlp-dim": 128,
            "--compute-dtype": "bfloat16", "--label-smoothing": 0.1, "--lr": 2e-3},
    "gpu": {"--val-split": 5000, "--test-split": 5000, "--epochs": 10, "--warmup-epochs": 0.5,
            "--batch-size": 128, "--dim": 64, "--depth": 4, "--heads": 2, "--mlp-dim": 128,
            "--compute-dtype": "bfloat16", "--label-smoothing": 0.1, "--lr": 2e-3},
}
# Every cell runs through the same preset, so a preset's later change moves no sweep silently.
BASE_PRESET = "cpu-small"
FEWSHOT_SHOTS = 10  # shots per class of the linear probe, as Wortsman et al.'s 10-shot transfer
# Each attention kind's peak learning rate at the cpu scale, chosen on validation accuracy by the lr-grid
# experiment (17 tokens, 1e-3 / 2e-3 / 4e-3, seeds 0 and 1: the best mean best_val_accuracy; test accuracy not
# read), from `reluattn sweep lr-grid --report --out docs/run-logs/cpu/lr-grid` on 2026-11-27 (42 runs, 2-core
# AMD EPYC). gelu, identity and relu peak at the grid's edge, within 0.3 points of 2e-3.
LEARNING_RATES: dict[str, float | None] = {"gelu": 4e-3, "identity": 4e-3, "relu": 4e-3, "relu2": 2e-3,
                                           "sigmoid": 2e-3, "softmax": 2e-3, "softplus": 2e-3}

EXPERIMENT_LIST = (ALPHA_SWEEP, SCALING, QK_NORM_AND_GATE, KV_MEMORY, LONG_SEQUENCE, LEARNED_ALPHA, LR_SELECTION,
                   SCALING_LR_GRID, SCALING_TUNED, SCALING_FAST_LR_GRID, SCALING_FAST)
EXPERIMENTS = {e.name: e for e in EXPERIMENT_LIST}


def cells_of(experiment: str, scale: str) -> list[Cell]:
    """The cells of `experiment` at `scale`, each with the scale's shared flags under its own."""
    if experiment not in EXPERIMENTS:
        raise ValueError(f"unknown experiment {experiment!r}; choose one of {', '.join(EXPERIMENTS)}")
    if scale not in SCALES:
        raise ValueError(f"unknown scale {scale!r}; choose one of {', '.join(SCALES)}")
    cells = EXPERIMENTS[experiment].grid(scale)
    names = [cell.name for cell in cells]
    assert len(names) == len(set(names)), f"{experiment}: duplicate cell names"
    return [Cell(cell.name, cell.labels, {**SCALE_FLAGS[scale], **_learning_rate(cell, scale), **cell.flags},
                 cell.seeds, cell.first_seed) for cell in cells]


def default_seeds(experiment: str, scale: str) -> int:
    """The seeds a cell of `experiment` runs at `scale` unless --seeds says otherwise: the scale's, or the
    experiment's own where its design says so (the cpu lr-grid's 2)."""
    return EXPERIMENTS[experiment].seeds.get(scale, DEFAULT_SEEDS[scale])


def seeds_of(cell: Cell, seeds: int) -> int:
    """How many seeds `cell` runs when a sweep asks for `seeds`: that many, or the cell's own where it asks more."""
    return max(seeds, cell.seeds or 0)


def value_column(scale: str) -> str:
    """The accuracy a scale's verdicts rest on: the held-out test split's where the scale carves one (nothing
    is chosen on it), else the best validation accuracy (the pilot, smoke)."""
    return "test_accuracy" if "--test-split" in SCALE_FLAGS[scale] else "best_val_accuracy"


def _learning_rate(cell: Cell, scale: str) -> dict:
    """The kind's chosen learning rate at the cpu and gpu scales, which share a recipe (cells that set --lr
    themselves keep theirs)."""
    kind = cell.flags.get("--attention")
    if scale not in ("cpu", "gpu") or "--lr" in cell.flags or LEARNING_RATES.get(kind) is None:
        return {}
    return {"--lr": LEARNING_RATES[kind]}


def planned_comparisons(experiment: str, scale: str) -> list[tuple[int, Planned]]:
    """(claim index, Planned) for every comparison of `experiment` at `scale`, each naming cells of its grid."""
    names = {cell.name for cell in cells_of(experiment, scale)}
    planned = [(index, p) for index, claim in enumerate(EXPERIMENTS[experiment].claims)
               for p in claim.planned(scale)]
    missing = {cell for _, p in planned for cell in (*p.a, *p.b)} - names
    assert not missing, f"{experiment}: comparisons name cells not in the grid: {sorted(missing)}"
    return planned


def train_arguments(cell: Cell, seed: int) -> list[str]:
    """The `reluattn train` arguments of one cell and seed (without --out, --data, --resume)."""
    arguments = ["--preset", BASE_PRESET, "--seed", str(seed), "--no-progress"]
    for flag, value in cell.flags.items():
        if value is True:
            arguments.append(flag)
        elif isinstance(value, tuple):  # a flag that takes several values (--token-keep)
            arguments += [flag, *(f"{v:g}" for v in value)]
        elif value is not None and value is not False:
            arguments += [flag, f"{value:g}" if isinstance(value, float) else str(value)]
    return arguments
