"""Do two runs compute the same numbers? Compares the metrics.jsonl records the two run folders share.

    python benchmarks/investigations/compare_runs.py RUN_A RUN_B

Question (docs/performance.md, "make train before and after the move"): does a code change leave training
bit for bit unchanged? Every (step, split) record present in both runs is compared exactly on its loss,
accuracy and learning rate; the validation records are printed side by side. Exits 1 if any differ.
"""

import argparse
import sys

from reluattn.training.run_dir import read_metrics

FIELDS = ("loss", "accuracy", "learning_rate")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_a")
    parser.add_argument("run_b")
    args = parser.parse_args()
    records_a, records_b = read_metrics(args.run_a), read_metrics(args.run_b)
    by_key = {(record["step"], record["split"]): record for record in records_b}
    shared = [(record, by_key[(record["step"], record["split"])]) for record in records_a
              if (record["step"], record["split"]) in by_key]
    differing = [(a, b) for a, b in shared if any(a.get(field) != b.get(field) for field in FIELDS)]
    for a, b in differing:
        print(f"step {a['step']} {a['split']}: " + ", ".join(f"{f} {a.get(f)!r} vs {b.get(f)!r}" for f in FIELDS))
    print(f"{len(shared) - len(differing)} of {len(shared)} shared records identical in {', '.join(FIELDS)} "
          f"({len(records_a)} and {len(records_b)} records in all)")
    print("| step | split | accuracy A (%) | accuracy B (%) | loss A | loss B |\n|---|---|---|---|---|---|")
    for a, b in shared:
        if a["split"] == "val":
            print(f"| {a['step']} | val | {100 * a['accuracy']:.2f} | {100 * b['accuracy']:.2f} "
                  f"| {a['loss']:.4f} | {b['loss']:.4f} |")
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
