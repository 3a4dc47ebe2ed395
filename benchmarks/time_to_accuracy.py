"""Time to accuracy: train a preset with relu / L and with softmax, one after the other, and print the
validation accuracy reached against wall-clock time, then each run's test accuracy (the held-out test split
nothing is chosen on). Writes time_to_accuracy.csv and time_to_accuracy.png into --out.

    PYTHONPATH=. python benchmarks/time_to_accuracy.py --preset cpu-fast --data ../shared/data/cifar10-train.zip \
        --out runs/tta [--kinds relu softmax] [--marks 5 10 15] [-- extra train flags]

Wall time is the whole `reluattn train` command, from a fresh run folder (the decoded-image cache should be
warm: run any command on the data once first): start-up, data loading, compilation, training,
validations and the final test pass. A validation record's time is the trainer's elapsed training time
(metrics.jsonl "time") plus the command's start-up before the loop (its wall time minus the trainer's).
The accuracy at a mark is that of the last validation at or before it: a run sized for 15 minutes is not
annealed at 5 or 10, so those columns say what a longer schedule had reached, not what a 5-minute one would.
Time the runs on an otherwise idle machine; the table names the CPU.
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import time
from pathlib import Path

from reluattn import palette
from reluattn.machine import machine_description


def run(preset: str, kind: str, data: str, out: Path, extra: list[str]) -> dict:
    """Train one run in a fresh folder; its validation curve on the wall clock and its summary."""
    folder = out / f"{preset}-{kind}"
    if folder.exists():
        raise SystemExit(f"{folder} exists: time a fresh run folder (remove it or pass another --out)")
    command = [sys.executable, "-m", "reluattn", "train", "--preset", preset, "--attention", kind, "--data", data,
               "--out", str(folder), "--no-progress", *extra]
    started = time.perf_counter()
    subprocess.run(command, check=True)
    wall = time.perf_counter() - started
    summary = json.loads((folder / "summary.json").read_text())
    startup = wall - summary["wall_time_s"]
    records = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines() if line.strip()]
    curve = [(startup + r["time"], r["accuracy"]) for r in records if r.get("split") == "val"]
    return {"kind": kind, "wall_s": wall, "startup_s": startup, "curve": curve, "summary": summary,
            "command": " ".join(["reluattn", *command[3:]])}


def accuracy_at(curve: list, seconds: float) -> float | None:
    reached = [accuracy for t, accuracy in curve if t <= seconds]
    return reached[-1] if reached else None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="cpu-fast")
    parser.add_argument("--data", required=True)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--kinds", nargs="+", default=["relu", "softmax"])
    parser.add_argument("--marks", nargs="+", type=float, default=[5, 10, 15], help="minutes")
    args, extra = parser.parse_known_args(argv)
    extra = [flag for flag in extra if flag != "--"]
    args.out.mkdir(parents=True, exist_ok=True)
    results = [run(args.preset, kind, args.data, args.out, extra) for kind in args.kinds]

    print(f"\ntime to accuracy, preset {args.preset}, {machine_description()} (validation accuracy at each mark; "
          f"test = the held-out test split, final parameters)")
    header = ["kind", *[f"val @ {m:g} min" for m in args.marks], "final val", "test", "wall", "start-up"]
    print(" | ".join(header))
    rows = []
    for result in results:
        summary = result["summary"]
        marks = [accuracy_at(result["curve"], 60 * m) for m in args.marks]
        row = [result["kind"], *["-" if a is None else f"{100 * a:.1f}" for a in marks],
               f"{100 * summary['final_val_accuracy']:.1f}",
               "-" if summary.get("test_accuracy") is None else f"{100 * summary['test_accuracy']:.1f}",
               f"{result['wall_s'] / 60:.1f} min", f"{result['startup_s']:.0f} s"]
        print(" | ".join(row))
        rows += [{"kind": result["kind"], "seconds": round(t, 1), "val_accuracy": a} for t, a in result["curve"]]
    with open(args.out / "time_to_accuracy.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["kind", "seconds", "val_accuracy"])
        writer.writeheader()
        writer.writerows(rows)
    (args.out / "time_to_accuracy.json").write_text(json.dumps(
        {"machine": machine_description(), "preset": args.preset,
         "runs": [{k: v for k, v in r.items() if k != "curve"} | {"curve": r["curve"]} for r in results]},
        indent=1) + "\n")
    _figure(results, args.out / "time_to_accuracy.png", args.preset, args.marks)
    print(f"wrote {args.out / 'time_to_accuracy.csv'}, .json and .png")
    return 0


def _figure(results, path: Path, preset: str, marks) -> None:
    from matplotlib.figure import Figure
    figure = Figure(figsize=(6.5, 4.2), layout="constrained")
    axes = figure.subplots()
    for index, result in enumerate(results):
        minutes = [t / 60 for t, _ in result["curve"]]
        axes.plot(minutes, [100 * a for _, a in result["curve"]], ms=3, **palette.series(index),
                  label=f"{result['kind']} (test {100 * result['summary'].get('test_accuracy', float('nan')):.1f} %)")
    for mark in marks:
        axes.axvline(mark, color=palette.REFERENCE, lw=0.6)
    axes.set(xlabel="wall-clock minutes (whole command)", ylabel="validation accuracy (%)",
             title=f"{preset}: accuracy against time, {machine_description()}")
    axes.grid(alpha=0.3)
    axes.legend()
    figure.savefig(path, dpi=120)


if __name__ == "__main__":
    sys.exit(main())
