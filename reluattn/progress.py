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

__all__ = ["tqdm", "seconds_left", "duration"]


def seconds_left(remaining, seconds: dict, default: float) -> float:
    """The remaining runs' time: each at the mean time of its cell's finished runs (cells differ tens of times
    in cost, so one average over all runs misleads), `default` for a cell with none finished yet."""
    return sum(sum(seconds[c.name]) / len(seconds[c.name]) if seconds.get(c.name) else default
               for c, _ in remaining)


def duration(seconds: float) -> str:
    minutes, seconds = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min" if hours else f"{minutes} min {seconds:02d} s"
