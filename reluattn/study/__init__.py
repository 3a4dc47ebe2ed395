"""The reproduction study: the papers' claims as named grids of `reluattn train` runs, and their verdicts.

    reluattn sweep EXPERIMENT --scale cpu --seeds 3 --data PATH --out DIR     (the command line, cli.py)

    experiments.py  one Experiment record per claim: the quoted sentence, the grid, the planned comparisons
                    with their margins, the figure; the scales (smoke, pilot, cpu, gpu); the records
                    themselves in grids.py and scaling_grids.py (Fig. 1's)
    sweep.py        running a grid resumably, one `reluattn train` process per cell and seed
    statistics.py   compare, equivalent, holm: calibrated tests over seeds
    verdicts.py     each planned comparison of an experiment, tested, Holm-corrected within it
    report.py       the table (CSV, JSON) from the run folders alone; figures.py its figures

The study reaches the trainer only through the `reluattn train` command and the files of its run folders.
Importing it changes no process-wide setting (figures draw on their own matplotlib Figure).
"""

from .statistics import compare, equivalent, holm

__all__ = ["compare", "equivalent", "holm"]
