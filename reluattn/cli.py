"""The command line: `reluattn train | evaluate | plot | attention` (also `python -m reluattn ...`).

Bad input (a missing archive, a corrupted checkpoint, an unknown attention kind, a full disk, ...) ends
with one line on stderr saying what is wrong and what to do, and a non-zero exit code; `--debug` shows
the traceback instead.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import traceback
import warnings

from . import BACKENDS
from .data import DATA_ENV
from .training.fewshot import FEWSHOT_KEYS
from .training.flags import FLAGS, add_flags, train_config_from_args
from .training.flags import GROUPS as FLAG_GROUPS
from .training.presets import PRESET_SUMMARIES, PRESETS

PROG = "reluattn"


class UsageError(ValueError):
    """A command line that cannot work; the message says what to change."""


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (not usage + error) and never calls sys.exit itself."""

    def error(self, message):
        raise UsageError(f"{self.prog}: {message} (see {self.prog} --help)")


def _train_parser(commands) -> argparse.ArgumentParser:
    presets = "\n".join(f"  {name}: {PRESET_SUMMARIES[name]}" for name in PRESETS)
    p = commands.add_parser(
        "train", help="train a ViT", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Train a ViT on CIFAR-10/100 or an image folder. Flags override the preset; with --resume "
                    "they override\nthe saved run, and only the operational ones (logging, validation and "
                    "checkpoint intervals) may differ.",
        epilog=f"presets:\n{presets}\n\nexample: reluattn train --preset cpu-small --attention softmax "
               f"--data cifar10-train.zip --out runs/softmax")
    groups = {key: p.add_argument_group(title) for key, title in FLAG_GROUPS.items()}
    run = groups["run"]  # the options that are no config field, then every field's flag (training/flags.py)
    run.add_argument("--preset", choices=sorted(PRESETS), help="starting recipe (default: cpu-small)")
    run.add_argument("--out", help="run directory for checkpoints and metrics.jsonl (default: runs/<preset>-<kind>)")
    run.add_argument("--resume", action="store_true", help="continue the run in --out from its latest checkpoint "
                     "(on the data it recorded, unless --data is given)")
    run.add_argument("--allow-different-data", action="store_true",
                     help="with --resume: continue even though the images differ from the ones the run recorded")
    run.add_argument("--no-progress", action="store_true", help="no progress bar (log lines only)")
    groups["data"].add_argument("--data", help=f"CIFAR archive or folder, or an image folder/.zip (default: "
                                f"${DATA_ENV}, else download CIFAR)")
    add_flags(groups)
    return p


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description="ReLU attention ViTs: train, evaluate, plot.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    parser.add_argument("--version", action="version", version=f"{PROG} {_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    commands.required = True
    _train_parser(commands)

    p = commands.add_parser("evaluate", help="accuracy and loss of a checkpoint on a split")
    p.add_argument("--checkpoint", required=True, help="a run directory (its latest checkpoint) or a checkpoint")
    p.add_argument("--data", help=f"the dataset (default: ${DATA_ENV}, else the path the run trained on)")
    p.add_argument("--split", help="test, train, val (the run's held-out images) or a folder split "
                   "(default: test when the dataset has it, else val)")
    p.add_argument("--json", action="store_true", help='print only {"accuracy", "loss", "n", "error"} as JSON '
                   '(scores null and "error" set when they are not finite)')
    p.add_argument("--batch-size", type=int, default=500)
    p.add_argument("--backend", choices=BACKENDS, help="default: the run's backend")
    add_flags({"model": p}, [flag for flag in FLAGS if flag.dest in ("impl", "block_size")])
    p.add_argument("--fewshot", type=int, metavar="K",
                   help="also a K-shot linear probe (closed-form ridge regression on the pre-logits) on the split: "
                        "K images per class to fit, the rest to score, over --fewshot-seeds draws")
    p.add_argument("--fewshot-seeds", type=int, default=5, help="draws of the K shots (default 5)")

    p = commands.add_parser("plot", help="training curves of one or more runs, one PNG")
    p.add_argument("runs", nargs="+", metavar="RUN_DIR")
    p.add_argument("--output", default="curves.png", help="PNG to write (default: curves.png)")
    p.add_argument("--x", choices=("step", "epoch", "time"), default="step",
                   help="the x axis: optimizer step, epoch, or wall time in seconds (default: step)")

    _sweep_parser(commands)

    p = commands.add_parser("attention", help="attention maps of one image, PNG")
    p.add_argument("--checkpoint", required=True, help="a run directory (its latest checkpoint) or a checkpoint")
    p.add_argument("--data", help=f"the dataset (default: ${DATA_ENV}, else the path the run trained on)")
    p.add_argument("--index", type=int, required=True, help="which image of the split")
    p.add_argument("--split", help="as for evaluate")
    p.add_argument("--output", help="PNG to write (default: attention-<split>-<index>.png)")
    p.add_argument("--backend", choices=BACKENDS, help="default: the run's backend")
    return parser


def _version() -> str:
    from . import __version__
    return __version__


# ---------------------------------------------------------------------------------------- train's config

# The flag of each config field that has one: "AttentionConfig.kind" -> "--attention".
FIELD_FLAGS = {f"{flag.owner}.{flag.path[-1]}": flag.name for flag in FLAGS}


def _as_flags(message: str, flags: set) -> str:
    """A config error with its field names (`TrainConfig.batch_size`) replaced by the flags that set them."""
    def flag(match):
        name = FIELD_FLAGS.get(match.group(0), "--" + match.group(2).replace("_", "-"))
        return name if name in flags else match.group(0)
    return re.sub(r"\b(TrainConfig|ViTConfig|AttentionConfig|OptimizerConfig|AugmentationConfig)\.(\w+)", flag,
                  message)


def _configured(args, base):
    """train's config from `base` and the flags; a value no config takes is a usage error naming its flag."""
    try:
        config = train_config_from_args(args, base)
    except ValueError as error:
        raise UsageError(f"{PROG} train: {_as_flags(str(error), _train_flags())}") from None
    if args.block_size is not None and config.model.attention.impl != "blocked":
        raise UsageError(f"{PROG} train: --block-size applies only with --impl blocked; add --impl blocked or drop "
                         f"--block-size")
    return config


def _train_flags() -> set:
    commands = next(action for action in build_parser()._actions if isinstance(action, argparse._SubParsersAction))
    return {flag for action in commands.choices["train"]._actions for flag in action.option_strings}


def _command_train(args) -> int:
    from .training.loop import train
    from .training.presets import get_preset
    out = args.out
    if args.resume:
        if not out:
            raise UsageError("reluattn train: --resume needs --out DIR, the run directory to continue")
        from .training.resume import saved_train_config
        from .training.run_folder import refuse_if_in_use
        refuse_if_in_use(out)  # another run using the folder is the news, not what it has (not) saved yet
        saved = saved_train_config(out)
        if args.preset is not None and args.preset != saved.preset:
            raise UsageError(f"reluattn train: {out} was trained with preset {saved.preset!r}, not "
                             f"{args.preset!r}; drop --preset or start a new run with another --out")
        config = _configured(args, saved)
    else:
        config = _configured(args, get_preset(args.preset or "cpu-small"))
        if not out:
            out = os.path.join("runs", f"{config.preset or 'custom'}-{config.model.attention.kind}")
    if args.allow_different_data and not args.resume:
        raise UsageError("reluattn train: --allow-different-data only applies with --resume")
    result = train(config, out, data=args.data, resume=args.resume, progress=not args.no_progress,
                   allow_different_data=args.allow_different_data)
    return result.exit_code


def _command_evaluate(args) -> int:
    from .training.evaluation import evaluate_checkpoint
    keys = ["accuracy", "loss", "n", "error"] + (list(FEWSHOT_KEYS) if args.fewshot is not None else [])
    try:
        result = evaluate_checkpoint(args.checkpoint, data=args.data, split=args.split,
                                     batch_size=args.batch_size, backend=args.backend, progress=not args.json,
                                     impl=args.impl, block_size=args.block_size, fewshot=args.fewshot,
                                     fewshot_seeds=args.fewshot_seeds)
    except (ValueError, OSError, RuntimeError) as error:
        if args.json:  # still one JSON object on stdout (null scores, the error); main prints the line on stderr
            print(json.dumps(dict(dict.fromkeys(keys), error=_one_line(error))))
        raise
    if args.json:  # always valid JSON: null scores and an "error" when they are not finite
        print(json.dumps({key: result[key] for key in keys}, allow_nan=False))
    elif result["error"] is None:
        print(f"{result['split']}: accuracy {result['accuracy']:.4f}  loss {result['loss']:.4f}  "
              f"n {result['n']}  ({result['checkpoint']})")
        if args.fewshot is not None:
            print(f"{result['split']}: {result['fewshot_shots']}-shot linear probe accuracy "
                  f"{result['fewshot_accuracy']:.4f} +- {result['fewshot_std']:.4f} (std over "
                  f"{result['fewshot_seeds']} draws; scored on {result['fewshot_n']} images)")
    if result["error"] is not None:
        print(f"{PROG}: error: no scores for {result['checkpoint']}: {result['error']}", file=sys.stderr)
        return 1
    return 0


def _command_plot(args) -> int:
    from .training.plots import plot_runs
    path = plot_runs(args.runs, args.output, x=args.x)
    print(f"wrote {path}")
    return 0


def _command_attention(args) -> int:
    from .training.evaluation import attention_figure
    path = attention_figure(args.checkpoint, data=args.data, index=args.index, split=args.split,
                            output=args.output, backend=args.backend)
    print(f"wrote {path}")
    return 0


def _sweep_parser(commands) -> None:
    from .study.experiments import EXPERIMENTS, SCALES
    lines = [f"  {name}: {e.summary}" for name, e in EXPERIMENTS.items()]
    p = commands.add_parser(
        "sweep", help="train an experiment's grid (resumable) and report it",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Train every cell of a named experiment once per seed, one run directory each, then write "
                    "results.csv,\nresults.json and a figure into --out. Rerunning skips finished cells and "
                    "resumes a killed one.",
        epilog="experiments:\n" + "\n".join(lines) + "\n\nscales: smoke (a few steps, tiny model: tests); pilot "
               "(the first study: ViT 64x4, 4 epochs on 20,000 images, 2 seeds; 16-70 s per 17-token run and "
               "34-58 s per 65-token run on idle 2-core AMD EPYCs); cpu (the main study: ViT 64x4, 10 epochs on "
               "40,000 images, a held-out test split, each kind at its lr-grid learning rate, 3 seeds, 20 for "
               "relu / L vs softmax); gpu (one GPU)\n\nexample: reluattn sweep alpha-sweep --scale cpu "
               "--data cifar10-train.zip --out sweeps/alpha-sweep")
    p.add_argument("experiment", choices=sorted(EXPERIMENTS), metavar="EXPERIMENT",
                   help=f"one of {', '.join(EXPERIMENTS)}")
    p.add_argument("--scale", choices=SCALES, help="the grid's budget (default: cpu; with --report, the scale "
                   "the folder's sweep.json records)")
    p.add_argument("--seeds", type=int, help="runs per cell, seeds 0..N-1 (default: the scale's, 3 at cpu, 2 for "
                   "its lr-grid; relu / L-vs-softmax cells get at least 20 there)")
    p.add_argument("--out", help="the sweep folder (default: sweeps/<experiment>-<scale>)")
    p.add_argument("--data", help="the dataset, as for `reluattn train` (default: $RELUATTN_DATA)")
    p.add_argument("--cells", nargs="+", metavar="GLOB", help="run only the cells matching these shell-style patterns "
                   "(e.g. t17-* for the 17-token cells; see --list)")
    p.add_argument("--shard", metavar="K/N", type=_shard, help="run only every N-th of the planned runs from the "
                   "K-th on, so N sweeps with their own --out share a grid (merge them after with --merge)")
    p.add_argument("--report", action="store_true", help="only rebuild the report from the run directories "
                   "(the experiment and scale must be those of the folder's sweep.json)")
    p.add_argument("--list", action="store_true",
                   help="only print the cells, their train commands and what is left to run in --out")
    p.add_argument("--merge", nargs="+", metavar="SOURCE", help="only copy the finished runs (their logs, no "
                   "checkpoints) of these sweep folders of the same experiment and scale into --out, then report")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (log lines only)")


def _shard(text: str) -> tuple[int, int]:
    from .study.sweep_folder import parse_shard
    try:
        return parse_shard(text)
    except ValueError as error:  # argparse's own one-line usage error, naming the flag
        raise argparse.ArgumentTypeError(str(error)) from None


def _command_sweep(args) -> int:
    import shlex
    from pathlib import Path
    from .progress import time_to_go
    from .study.experiments import default_seeds, seeds_of, train_arguments
    from .study.sweep import report_sweep, run_sweep, select_cells
    from .study.sweep_folder import plan_sweep
    scale, shard = args.scale or "cpu", args.shard
    if args.merge or args.report:  # both read every run in the folders: a flag that picks runs would be ignored
        flags = (("--cells", args.cells), ("--seeds", args.seeds), ("--shard", shard))
        picked = [flag for flag, value in flags if value]
        if picked:
            raise UsageError(f"{PROG} sweep: {', '.join(picked)} only pick the runs a sweep or --list plans; "
                             f"{'--merge' if args.merge else '--report'} takes every finished run, so drop them")
    out = Path(args.out or os.path.join("sweeps", f"{args.experiment}-{scale}"))
    if args.list:
        try:
            cells = select_cells(args.experiment, scale, args.cells)
            seeds = args.seeds or default_seeds(args.experiment, scale)
            for cell in cells:
                start = f" from {cell.first_seed}" if cell.first_seed else ""
                print(f"{cell.name} ({seeds_of(cell, seeds)} seeds{start}): "
                      f"{shlex.join(['reluattn', 'train', *train_arguments(cell, cell.first_seed)])}", flush=True)
            jobs, _, pending, seconds = plan_sweep(out, cells, seeds, shard)
            print(f"{args.experiment} at scale {scale}: {len(cells)} cells, {len(jobs)} runs planned, "
                  f"{len(jobs) - len(pending)} finished in {out}{time_to_go(pending, seconds)}", flush=True)
        except BrokenPipeError:  # `--list | head`: the reader has seen enough
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing more to flush at exit
        return 0
    if args.merge:
        from .study.merge import merge_sweeps
        counts = merge_sweeps(out, args.merge, args.experiment, scale)
        print(f"merged into {out}: {counts['copied']} runs copied, {counts['replaced']} stopped runs replaced by "
              f"finished ones, {counts['kept']} finished there already", flush=True)
    if args.report or args.merge:
        from .study.verdicts import describe
        paths = report_sweep(out, args.experiment, args.scale)
        print(f"wrote {paths['table']}, {paths['json']}, {paths['figure']}")
        for entry in paths["comparisons"]:
            print(describe(entry))
        for claim in paths["claims"]:
            print(f"claim \"{claim['quote']}\" ({claim['source']}): {claim['verdict']}")
        return 0
    counts = run_sweep(args.experiment, scale=scale, seeds=args.seeds or default_seeds(args.experiment, scale), out=out,
                       data=args.data, cells=args.cells, shard=shard, progress=not args.no_progress)
    return 1 if counts["failed"] else 0


COMMANDS = {"train": _command_train, "evaluate": _command_evaluate, "plot": _command_plot,
            "attention": _command_attention, "sweep": _command_sweep}


def _one_line_data_warnings(previous):
    """A showwarning that prints a data notice (reluattn.data.DataWarning) as one line on stderr and hands
    every other warning to `previous`."""
    from .data import DataWarning

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, DataWarning):
            print(f"{PROG}: warning: {_one_line(message)}", file=file or sys.stderr)
        else:
            previous(message, category, filename, lineno, file, line)
    return show


def _ignore_further_interrupts() -> None:
    """After a stop has been handled, the process only exits: ignore SIGINT from here on, so that one more
    Ctrl-C cannot land in a destructor (tqdm's) and print "Exception ignored in ..." over the message."""
    import signal
    import threading
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def main(argv=None) -> int:
    """Run one command; returns the exit code (0 success, 1 bad input/failure, 2 usage, 130/143 signals)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    from .training import provenance
    provenance.COMMAND[:] = [PROG, *map(str, argv)]  # what the run records: this call's arguments
    debug = "--debug" in argv
    argv = [arg for arg in argv if arg != "--debug"]
    previous_show_warning = warnings.showwarning
    warnings.showwarning = _one_line_data_warnings(previous_show_warning)
    try:
        args, unknown = build_parser().parse_known_args(argv)
        if unknown:  # after the command: its own --help lists what it takes
            raise UsageError(f"{PROG} {args.command}: unrecognized arguments: {' '.join(unknown)} (see {PROG} "
                             f"{args.command} --help)")
        return COMMANDS[args.command](args)
    except SystemExit as exit_:  # --help and --version
        return exit_.code if isinstance(exit_.code, int) else 0
    except KeyboardInterrupt as interrupt:
        if debug:
            raise
        _ignore_further_interrupts()  # a Ctrl-C during the exit would only print a traceback from a destructor
        print(f"{PROG}: {str(interrupt) or 'interrupted'}", file=sys.stderr)  # a run's names its last checkpoint
        return 130
    except UsageError as error:
        if debug:
            raise
        print(str(error), file=sys.stderr)
        return 2
    except (ValueError, OSError, RuntimeError) as error:  # DataError, CheckpointError, config errors, disk
        if debug:
            raise
        print(f"{PROG}: error: {_one_line(error)}", file=sys.stderr)
        return 1
    except Exception as error:  # anything else is a bug: still one line, but say how to see it
        if debug:
            raise
        print(f"{PROG}: internal error: {type(error).__name__}: {_one_line(error)} (rerun with --debug for the "
              f"traceback and report it)", file=sys.stderr)
        traceback.clear_frames(error.__traceback__)
        return 1
    finally:
        warnings.showwarning = previous_show_warning


def _one_line(error: BaseException) -> str:
    text = str(error) or type(error).__name__
    if isinstance(error, OSError) and error.strerror:  # without "[Errno N]"; the file's name when it has one
        text = f"{error.strerror}: {error.filename}" if error.filename else error.strerror
    return " ".join(text.split())


if __name__ == "__main__":
    raise SystemExit(main())
