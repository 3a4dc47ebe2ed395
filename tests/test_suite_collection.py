"""`make test` spreads the suite over pytest-xdist workers, each of which collects it on its own, and xdist
refuses the run unless every worker collected the same test ids. An id made from a value that changes with
time (gzip bytes, whose header holds the second they were made) passes in one process and fails CI at random:
on 2026-12-02 two workers that collected a second apart disagreed and `make test` stopped before any test."""

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def collected_ids(hash_seed: str) -> list[str]:
    environment = dict(os.environ, PYTHONHASHSEED=hash_seed)  # set iteration order may not change an id either
    result = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:xdist",
                             "-p", "no:cacheprovider", "tests"], cwd=ROOT, env=environment, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return [line for line in result.stdout.splitlines() if "::" in line]


def test_two_collections_a_second_apart_give_the_same_test_ids():
    first = collected_ids("0")
    time.sleep(1.1)  # past the next whole second, where a timestamp in an id would move
    second = collected_ids("1")
    assert len(first) > 1000  # the whole suite was collected
    differ = sorted(set(first) ^ set(second))
    assert not differ, f"{len(differ)} ids differ between the two collections, e.g. {differ[:4]}"
    assert first == second  # and in the same order (xdist compares the lists)
