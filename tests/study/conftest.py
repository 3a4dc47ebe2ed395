"""The study's tests check every grid at every scale. scaling-tuned and scaling-fast have a grid only once their
selection grids' runs have chosen their learning rates (until then they refuse, test_scaling_grids checks that),
so these tests run with stand-in rates (2e-3 for every size and kind) wherever the real ones are not in yet."""

import pytest

from reluattn.study import grids, scaling_grids


@pytest.fixture(autouse=True)
def stand_in_tuned_rates(monkeypatch):
    for table in scaling_grids.RATE_TABLES.values():
        for scale, ladder in scaling_grids.SCALING_LADDER.items():
            if not table.get(scale):
                rates = {grids.size_key(d, n, kind): 2e-3 for d, n, _, _ in ladder for kind in scaling_grids.KINDS}
                monkeypatch.setitem(table, scale, rates)
