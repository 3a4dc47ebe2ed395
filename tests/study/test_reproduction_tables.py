"""Tables of docs/reproduction.md written by hand as runs come in, a session at a time: every entry of the
long-sequence table (mean ± sd (seeds), attention statistics) must be what the committed results.csv gives, and
every count of the "Not run yet" table what `reluattn sweep ... --list` finds in the committed folders."""

from __future__ import annotations

import csv
import re
import statistics
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "reproduction.md"
RESULTS = ROOT / "docs" / "run-logs" / "cpu" / "long-sequence" / "results.csv"
HEADER = ("| tokens | softmax | relu / L | relu / √(L/2) | reluformer | entropy / log L: softmax, relu / L "
          "| zero fraction, relu / L |")
METHODS = ("softmax", "relu-over-L", "relu-over-sqrt-half-L", "reluformer")  # the accuracy columns, in order


def table_rows(text: str, header: str) -> list[list[str]]:
    """The cells of each row of the table that starts with `header` (after its |---| line)."""
    lines = text.splitlines()
    start = lines.index(header) + 2
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def expected_rows(rows: list[dict]) -> dict[str, list[str]]:
    """The table's rows as results.csv gives them: tokens -> the six cells after the tokens column."""
    accuracy, entropy, zeros = defaultdict(list), defaultdict(list), defaultdict(list)
    for row in rows:
        key = (row["tokens"], row["method"])
        accuracy[key].append(100 * float(row["test_accuracy"]))
        entropy[key].append(float(row["attention_entropy_ratio"]))
        zeros[key].append(float(row["attention_zero_fraction"]))
    table = {}
    for tokens in sorted({tokens for tokens, _ in accuracy}, key=int):
        cells = []
        for method in METHODS:
            values = accuracy[tokens, method]
            cells.append(f"{statistics.mean(values):.1f} ± {statistics.stdev(values):.1f} ({len(values)})")
        cells.append(f"{statistics.mean(entropy[tokens, 'softmax']):.2f}, "
                     f"{statistics.mean(entropy[tokens, 'relu-over-L']):.2f}")
        cells.append(f"{statistics.mean(zeros[tokens, 'relu-over-L']):.2f}")
        table[tokens] = cells
    return table


def test_the_long_sequence_table_is_what_results_csv_gives():
    with RESULTS.open() as f:
        expected = expected_rows([row for row in csv.DictReader(f) if row["status"] == "done"])
    written = {row[0]: row[1:] for row in table_rows(PAGE.read_text(), HEADER)}
    assert written == expected


def test_a_stale_seed_count_on_the_page_is_caught():
    """The comparison is of each whole written cell: a count the page did not update differs."""
    rows = [{"tokens": "17", "method": method, "test_accuracy": str(0.5 + 0.01 * seed),
             "attention_entropy_ratio": "0.5", "attention_zero_fraction": "0.25"}
            for method in METHODS for seed in range(3)]
    expected = expected_rows(rows)
    assert expected["17"] == ["51.0 ± 1.0 (3)"] * 4 + ["0.50, 0.50", "0.25"]
    page = "\n".join([HEADER, "|---|---|---|---|---|---|---|",
                       "| 17 | 51.0 ± 1.0 (2) | 51.0 ± 1.0 (3) | 51.0 ± 1.0 (3) | 51.0 ± 1.0 (3) | 0.50, 0.50 | 0.25 |",
                       "", "after the table"])
    written = {row[0]: row[1:] for row in table_rows(page, HEADER)}
    assert written["17"][1:] == expected["17"][1:] and written != expected


NOT_RUN_HEADER = ("| experiment | cells | runs planned | finished | left | tokens, model | time per run "
                  "| CPU time left |")


def listed_counts(experiment: str, capsys) -> list[str]:
    """Cells, runs planned, finished and left, as `reluattn sweep EXPERIMENT --scale cpu --list` counts the
    committed folder; an experiment still waiting for its learning rates plans its cells x seeds, none run."""
    from reluattn.cli import main
    from reluattn.study.records import FEWER_HEADLINE_SEEDS, HEADLINE_SEEDS
    out = ROOT / "docs" / "run-logs" / "cpu" / experiment
    try:
        assert main(["sweep", experiment, "--scale", "cpu", "--out", str(out), "--list"]) == 0
    except SystemExit:  # the usage error of a grid whose rates are not chosen yet names its waiting cells
        error = capsys.readouterr().err
        assert "waits for its learning rates (" in error, error
        assert not list(out.glob("*/seed*/cell.json")), f"{experiment} has runs before its rates were chosen"
        cells = len(error.split("waits for its learning rates (")[1].split(")")[0].split(", "))
        planned = cells * FEWER_HEADLINE_SEEDS.get(experiment, HEADLINE_SEEDS["cpu"])
        return [str(cells), str(planned), "0", str(planned)]
    last = capsys.readouterr().out.strip().splitlines()[-1]
    # the counts only: the time to go after them holds numbers too where runs finished on this machine
    cells, planned, finished = map(int, re.search(r"(\d+) cells, (\d+) runs planned, (\d+) finished", last).groups())
    return [str(cells), str(planned), str(finished), str(planned - finished)]


def test_the_not_run_yet_table_counts_what_the_committed_folders_hold(capsys):
    """The page's "Not run yet" table is updated by hand as runs are committed: a stale count fails here."""
    rows = table_rows(PAGE.read_text(), NOT_RUN_HEADER)
    assert len(rows) >= 9
    for experiment, *counts in rows:
        assert counts[:4] == listed_counts(experiment, capsys), experiment
