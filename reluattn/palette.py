"""The one palette every figure of the project draws with: the tutorials, `reluattn plot` / `attention`, the
study's report figures, the docs' figures and the benchmarks.

Colours are Okabe and Ito's colour-blind-safe set ("Color Universal Design", 2008), in the order that puts
the two most distinct first (blue, vermillion); its yellow is left out (1.3:1 against a white page). Series
are never told apart by colour alone: `series(i)` gives the i-th series its colour, a marker and a line
style, and `prop_cycle()` cycles the three together, so that two lines still differ in print, in grey and
for a reader who cannot tell red from green. Colour maps are perceptually uniform and colour-blind-safe
(viridis, inferno) or, for signed values, blue against red (RdBu), never red against green.

    import matplotlib.pyplot as plt
    from reluattn import palette
    plt.rcParams.update(palette.rc_params())        # a notebook: every later plot uses the palette
    axes.set_prop_cycle(palette.prop_cycle())       # one Figure's axes, nothing global touched
    axes.plot(x, y, label="relu / L", **palette.series(0))

Importing this module imports nothing (matplotlib's cycler is imported inside prop_cycle).
"""

from __future__ import annotations

# Okabe & Ito's eight colours, by their names.
OKABE_ITO = {"black": "#000000", "orange": "#E69F00", "sky blue": "#56B4E9", "bluish green": "#009E73",
             "yellow": "#F0E442", "blue": "#0072B2", "vermillion": "#D55E00", "reddish purple": "#CC79A7"}

# The series colours, in order (yellow left out).
COLOURS = tuple(OKABE_ITO[name] for name in ("blue", "vermillion", "bluish green", "reddish purple", "orange",
                                             "sky blue", "black"))
# A marker and a line style per series, as many as colours: the cues that do not need colour.
MARKERS = ("o", "s", "^", "D", "v", "P", "X")
LINESTYLES = ("-", "--", "-.", ":", (0, (5, 1.5, 1, 1.5, 1, 1.5)), (0, (8, 2)), (0, (1, 1)))
# Reference lines (chance, a predicted constant, a grid of blocks): a dark grey, 7:1 against white.
REFERENCE = "#595959"
# Colour maps: magnitudes (weights, heat maps over an image) and signed values (a Jacobian).
SEQUENTIAL = "viridis"
HEAT = "inferno"
DIVERGING = "RdBu_r"
GREYSCALE = "gray"  # a one-channel image, shown as it is


def colour(index: int) -> str:
    """The colour of series `index` (the palette repeats after len(COLOURS) series)."""
    return COLOURS[index % len(COLOURS)]


def series(index: int, line: bool = True, marker: bool = True) -> dict:
    """matplotlib keyword arguments for series `index`: its colour, and its marker and line style (left out,
    as "none", with line=False or marker=False: measured points alone, or a dense curve)."""
    return {"color": colour(index),
            "marker": MARKERS[index % len(MARKERS)] if marker else "none",
            "linestyle": LINESTYLES[index % len(LINESTYLES)] if line else "none"}


def prop_cycle():
    """matplotlib's property cycle of the palette: colour, marker and line style together."""
    from cycler import cycler

    return cycler(color=list(COLOURS), marker=list(MARKERS), linestyle=list(LINESTYLES))


def rc_params() -> dict:
    """matplotlib settings that make the palette the default (`plt.rcParams.update(rc_params())`)."""
    return {"axes.prop_cycle": prop_cycle(), "image.cmap": SEQUENTIAL, "lines.markersize": 4.5}


__all__ = ["COLOURS", "DIVERGING", "GREYSCALE", "HEAT", "LINESTYLES", "MARKERS", "OKABE_ITO", "REFERENCE", "SEQUENTIAL",
           "colour", "prop_cycle", "rc_params", "series"]
