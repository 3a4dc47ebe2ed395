"""The records of the study: a Cell of a grid, a Planned comparison, a Claim of a paper, an Experiment.

Margins of the equivalence tests ("matches", "equivalent") are fixed here, in accuracy (fractions), before
any run of the scale they judge (the pilot's were written after its runs were seen: say so when quoting them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

SCALES = ("smoke", "pilot", "cpu", "gpu")
# Seeds per cell at each scale, and at least this many for every relu / L-vs-softmax cell (the headline).
# The cpu and gpu headline counts were raised from 5 to 20 on 2026-11-27, before any of those cells' results
# was read, from the lr-grid's pooled seed spread (1.07 points): 20 seeds find a true 1-point difference with
# probability 0.83, 5 with 0.31 (docs/reproduction.md, "What the lr-grid says about power").
DEFAULT_SEEDS = {"smoke": 1, "pilot": 2, "cpu": 3, "gpu": 3}
HEADLINE_SEEDS = {"smoke": 1, "pilot": 2, "cpu": 20, "gpu": 20}
# The one exception, fixed on 2026-12-06 before any of its runs: scaling-fast's cells run 5 seeds (the least the
# study allows a relu / L-vs-softmax cell), because at 28 epochs a CPU run costs up to 4 times a scaling-tuned one;
# docs/reproduction.md states the power that gives.
FEWER_HEADLINE_SEEDS = {"scaling-fast": {"smoke": 1, "pilot": 2, "cpu": 5, "gpu": 5}}
LEAST_HEADLINE_SEEDS = 5
# "matches" within 1 point of accuracy; a slope within 1 point per tenfold training compute.
MATCH_MARGIN = 0.01
SLOPE_MARGIN = 0.01


@dataclass(frozen=True)
class Cell:
    """One model/recipe of a grid: its folder name, its grid coordinates and its `reluattn train` flags."""
    name: str
    labels: dict
    flags: dict = field(default_factory=dict)
    seeds: int | None = None  # at least this many seeds (the headline cells); None: the sweep's --seeds
    first_seed: int = 0       # seeds run from here: a selection grid keeps clear of the seeds it chooses for


@dataclass(frozen=True)
class Planned:
    """One comparison planned with the grid: mean of the `b` cells minus mean of the `a` cells (one cell
    each for a plain pair; several for a main effect averaged over a factorial design).

    expect: what the paper's sentence predicts — "b>a" (b better), "b>=a" (b not worse), or "equal"
    (equivalent within `margin`, two one-sided tests). kind "slope": the b - a differences of the pairs,
    regressed on log10 training FLOPs (`x`), the slope tested for equivalence with `margin` per decade."""
    question: str
    a: tuple
    b: tuple
    expect: str = "b>a"
    margin: float | None = None
    kind: str = "difference"
    x: tuple = ()

    def __post_init__(self):
        for name in ("a", "b"):
            if isinstance(getattr(self, name), str):
                object.__setattr__(self, name, (getattr(self, name),))
        assert self.expect in ("b>a", "b>=a", "equal"), self.expect
        assert self.kind in ("difference", "slope"), self.kind
        assert (self.margin is not None) == (self.expect == "equal"), "equivalence needs a margin, nothing else"


@dataclass(frozen=True)
class Claim:
    """A sentence of a paper, quoted, where it stands, and the comparisons that test it at a scale."""
    quote: str                             # the paper's words
    source: str                            # paper, figure, section
    planned: Callable[[str], list]         # planned(scale) -> [Planned]
    rule: str = "all"                      # "all": agrees when every comparison supports;
                                           # "most": agrees when at most a quarter contradict;
                                           # "none-best": no cell is resolvably ahead of every other
    scope: str = ""                        # when the paper's setting differs from what is run: what was run


@dataclass(frozen=True)
class Experiment:
    name: str
    summary: str                           # what the experiment asks, in one line
    grid: Callable[[str], list]            # grid(scale) -> [Cell]
    claims: tuple                          # (Claim, ...); empty for an exploration
    figure: str                            # which figure figures.py draws
    fewshot: bool = False                  # also run `reluattn evaluate --fewshot` on each finished cell
    exploration: str = ""                  # not a test of a claim: why, in one sentence
    seeds: dict = field(default_factory=dict)  # {scale: seeds} where the design runs other than the scale's default
    chooses_rates: bool = False            # a learning-rate selection grid: its report names the chosen rates
