"""The progress bar of every long job (tqdm's notebook widget where ipywidgets is installed, its text bar
everywhere else) and the time a sweep has left.

`tqdm.auto` picks the widget inside Jupyter and warns ("IProgress not found. Please update jupyter and
ipywidgets"), with the path of its own file, when ipywidgets is missing; asking first keeps that warning (and
the machine's path in it) out of the notebooks and the pages built from them.
"""

from __future__ import annotations

import importlib.util

if importlib.util.find_spec("ipywidgets") is not None:
    from tqdm.auto import tqdm
else:
    from tqdm.std import tqdm

__all__ = ["tqdm", "seconds_left", "time_to_go", "duration"]


def seconds_left(remaining, seconds: dict, default: float) -> float:
    """The remaining runs' time: each at the mean time of its cell's finished runs (cells differ tens of times
    in cost, so one average over all runs misleads), `default` for a cell with none finished yet."""
    return sum(sum(seconds[c.name]) / len(seconds[c.name]) if seconds.get(c.name) else default
               for c, _ in remaining)


def time_to_go(remaining, seconds: dict) -> str:
    """A sweep's first estimate, as " (...)": the remaining runs of cells with a run finished on this machine,
    at those runs' times (`seconds`); "" when nothing remains."""
    timed = [(cell, seed) for cell, seed in remaining if seconds.get(cell.name)]
    if not remaining or not timed:
        return " (no run finished on this machine to time them by yet)" if remaining else ""
    untimed = len(remaining) - len(timed)
    return (f" (about {duration(seconds_left(timed, seconds, 0.0))} by this machine's finished runs"
            + (f", and {untimed} in cells not timed here yet)" if untimed else ")"))


def duration(seconds: float) -> str:
    minutes, seconds = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min" if hours else f"{minutes} min {seconds:02d} s"
