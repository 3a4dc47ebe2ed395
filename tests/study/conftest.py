"""The study's tests check every grid at every scale. scaling-tuned has a grid only once scaling-lr-grid's runs
have chosen its learning rates (until then it refuses, test_scaling_grids checks that), so these tests run
with stand-in rates (2e-3 for every size and kind) wherever the real ones are not in yet."""

import pytest

from reluattn.study import grids, scaling_grids


@pytest.fixture(autouse=True)
def stand_in_tuned_rates(monkeypatch):
    for scale, ladder in scaling_grids.SCALING_LADDER.items():
        if not scaling_grids.SCALING_TUNED_RATES.get(scale):
            rates = {grids.size_key(d, n, kind): 2e-3 for d, n, _, _ in ladder for kind in scaling_grids.KINDS}
            monkeypatch.setitem(scaling_grids.SCALING_TUNED_RATES, scale, rates)
