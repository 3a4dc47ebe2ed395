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

__all__ = ["tqdm", "seconds_left", "time_left", "time_to_go", "duration"]


def seconds_left(remaining, seconds: dict) -> float:
    """The remaining runs' time, each at the mean time of its cell's finished runs (cells differ tens of times
    in cost, so one average over all runs misleads); a run of a cell with none finished counts nothing."""
    return sum(sum(seconds[c.name]) / len(seconds[c.name]) for c, _ in remaining if seconds.get(c.name))


def time_left(remaining, seconds: dict) -> str:
    """What a sweep has left, by the times (`seconds`) of the runs finished on this machine: the runs of timed
    cells as a duration, the others counted and not guessed (a sweep's larger cells tend to come last, so the
    pace of its first runs would understate them)."""
    if not remaining:
        return "nothing left"
    timed = [(cell, seed) for cell, seed in remaining if seconds.get(cell.name)]
    untimed = len(remaining) - len(timed)
    if not timed:
        return f"{untimed} run{'s' * (untimed != 1)} left, in cells no run on this machine has timed yet"
    return (f"about {duration(seconds_left(timed, seconds))} left by this machine's finished runs"
            + (f", and {untimed} run{'s' * (untimed != 1)} in cells not timed here yet" if untimed else ""))


def time_to_go(remaining, seconds: dict) -> str:
    """A sweep's first estimate, as " (...)" (time_left); "" when nothing remains."""
    return f" ({time_left(remaining, seconds)})" if remaining else ""


def duration(seconds: float) -> str:
    minutes, seconds = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min" if hours else f"{minutes} min {seconds:02d} s"
