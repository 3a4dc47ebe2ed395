"""The progress bar of every long job: tqdm's notebook widget where ipywidgets is installed, its text bar
everywhere else.

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

__all__ = ["tqdm"]
