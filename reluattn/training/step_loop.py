"""The loop over a run's steps, behind `train()` (loop.py, which prepares the run and its engine).

Step s (0-based) of a run is a pure function of the seed and s: its batch is positions
[p*B, (p+1)*B) of the permutation `np.random.default_rng([seed, epoch]).permutation(N)` (epoch, p =
divmod(s, steps per epoch); the last partial batch of an epoch is dropped), and its augmentation comes
from `fold_in(key(seed), s)`. A checkpoint holds parameters, optimizer state and the step, so a run
killed at any moment and resumed ends bit-identical to one that never stopped.

Metrics stay on the device and are fetched every `log_every` steps (and before every validation and
checkpoint); each fetch checks the loss, so a non-finite value stops the run before it can be saved,
leaving the last good checkpoint in place. Train records carry, besides loss and accuracy, any further
scalar the backend's step reports (the attention regulariser R, when the model computes it) and the learned
alpha / gamma per block and head (when the model learns them); validation records carry "attention", the
statistics of attention_statistics.py on a fixed batch (the first validation images). summary.json adds
the run's FLOPs (`TrainConfig.train_flops`: token dropping counted) and the device it ran on.

SIGINT (Ctrl-C) and SIGTERM finish the current step, save a checkpoint and return exit code 130 / 143; a
second one stops at once, naming the last checkpoint (StopRequests, at the end of this file).
"""

from __future__ import annotations

import math
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..params import flatten
from .attention_statistics import learned_length_factors, measure_attention, statistics_images
from .provenance import provenance
from .run_dir import CheckpointError, resolve_checkpoint, save_checkpoint, write_summary


# What every backend's train step reports; anything else it reports is logged as it comes.
STEP_METRICS = ("loss", "accuracy", "grad_norm", "learning_rate")


class NonFiniteLoss(RuntimeError):
    """The loss (or the parameters) stopped being finite; the message names the last good checkpoint."""


class Interrupted(KeyboardInterrupt):
    """A second Ctrl-C (or SIGTERM) stopped the run at once; the message names the last checkpoint."""


@dataclass
class TrainResult:
    exit_code: int                   # 0 done, 130 / 143 stopped by SIGINT / SIGTERM (checkpoint saved)
    step: int                        # optimizer steps done
    total_steps: int
    best_val_accuracy: float | None
    final_val_accuracy: float | None
    checkpoint: Path | None          # the newest checkpoint
    summary: str                     # the final line printed


def print_status(out, message: str) -> None:
    print(f"reluattn: {message}", file=out, flush=True)


class StepLoop:
    """The state of one invocation of the loop: `run` does the steps from `start` to `total`."""

    def __init__(self, config, engine, run_data, run_dir, log, history, elapsed, stdout, progress):
        self.config, self.engine, self.run_data, self.run_dir, self.log = config, engine, run_data, run_dir, log
        self.history = history
        self.elapsed_before = float(elapsed)  # training seconds of earlier invocations (resumes)
        self.stdout, self.progress = stdout, progress
        self.pending = []                      # (steps done, metrics still on device)
        self.last_checkpoint = None            # the newest checkpoint this run can fall back on
        self.learning_rate = float("nan")
        self.timed_images = 0
        self.timed_seconds = 0.0
        self.first_fetch = True

    def elapsed(self) -> float:
        return self.elapsed_before + time.perf_counter() - self.started

    def run(self, start: int, total: int, steps_per_epoch: int) -> TrainResult:
        from ..progress import tqdm
        config = self.config
        self.steps_per_epoch = steps_per_epoch
        eval_every = config.eval_every or steps_per_epoch
        checkpoint_every = config.checkpoint_every or steps_per_epoch
        self.started = self.interval_start = time.perf_counter()
        validation = self.run_data.validation
        if validation is not None:  # the fixed batch of the attention statistics
            self.statistics_images = validation.images[:statistics_images(config.model, len(validation))]
        self.bar = tqdm(total=total, initial=start, unit="step", dynamic_ncols=True, disable=not self.progress,
                        file=sys.stderr, desc=self.run_dir.name)
        order, order_epoch = None, None
        try:
            with StopRequests() as stop:
                for step in range(start, total):
                    epoch, position = divmod(step, steps_per_epoch)
                    if epoch != order_epoch:  # this epoch's data order, from (seed, epoch) alone
                        order = np.random.default_rng([config.seed, epoch]).permutation(len(self.run_data.train))
                        order_epoch = epoch
                    indices = order[position * config.batch_size:(position + 1) * config.batch_size]
                    self.pending.append((step + 1, self.engine.step(step, indices)))
                    done = step + 1
                    last = done == total
                    want_eval = validation is not None and (done % eval_every == 0 or last)
                    want_checkpoint = done % checkpoint_every == 0 or last
                    if want_eval or want_checkpoint or done % config.log_every == 0:
                        self.flush()
                    if want_eval:
                        self.validate(done)
                    if want_checkpoint:
                        self.save(done)
                    self.bar.update(1)
                    if stop.signal is not None and not last:  # asked to stop during this step or its logging
                        if not want_checkpoint:
                            self.flush()
                            self.save(done)
                        return self.stopped(stop.signal, done, total)
        except KeyboardInterrupt:
            raise Interrupted(self.interrupted()) from None
        finally:
            self.bar.close()
        return self.finish(total)

    # --------------------------------------------------------------------------------------- pieces

    def epoch_of(self, done: int) -> float:
        return round(done / self.steps_per_epoch, 4)

    def flush(self) -> None:
        """Fetch the pending steps' metrics, check them, log one train line."""
        if not self.pending:
            return
        records = self.engine.fetch([metrics for _, metrics in self.pending])
        steps = [done for done, _ in self.pending]
        self.pending = []
        now = time.perf_counter()
        seconds, self.interval_start = now - self.interval_start, now
        images = len(steps) * self.config.batch_size
        if not self.first_fetch:  # the first interval includes compilation; leave it out of images/s
            self.timed_images += images
            self.timed_seconds += seconds
        self.first_fetch = False
        self.learning_rate = records[-1]["learning_rate"]
        line = {"step": steps[-1], "epoch": self.epoch_of(steps[-1]), "split": "train",
                "loss": float(np.mean([r["loss"] for r in records])),
                "accuracy": float(np.mean([r["accuracy"] for r in records])),
                "learning_rate": self.learning_rate, "images_per_s": images / max(seconds, 1e-9),
                "time": round(self.elapsed(), 3)}
        for name in records[-1]:  # whatever else the step reports (e.g. the attention regulariser R)
            if name not in STEP_METRICS:
                line[name] = float(np.mean([r[name] for r in records]))
        line.update(learned_length_factors(self.engine.params))  # where the learned alpha / gamma are now
        bad = [(done, r) for done, r in zip(steps, records) if not (math.isfinite(r["loss"])
                                                                    and math.isfinite(r.get("grad_norm", 0.0)))]
        self.log.append(line)
        if bad:
            done, record = bad[0]
            self.non_finite(f"the loss became {record['loss']} (gradient norm {record.get('grad_norm')}) at step "
                            f"{done} with learning rate {record['learning_rate']:.3g}")
        self.bar.set_postfix(loss=f"{line['loss']:.3f}", acc=f"{line['accuracy']:.3f}",
                             lr=f"{self.learning_rate:.2e}", img_s=f"{line['images_per_s']:.0f}", refresh=False)
        if not self.progress:
            print_status(self.stdout, f"step {line['step']} epoch {line['epoch']:.2f}: loss {line['loss']:.4f} "
                                 f"accuracy {line['accuracy']:.4f} lr {self.learning_rate:.3g} "
                                 f"{line['images_per_s']:.0f} img/s")

    def non_finite(self, what: str):
        if self.last_checkpoint is not None:
            keep = f"the last good checkpoint, {self.last_checkpoint}, is kept"
        else:
            keep = "no checkpoint had been saved yet"
        raise NonFiniteLoss(f"{what}; training stopped and {keep}. Lower --lr (or raise --warmup-steps) and "
                            f"start a new run")

    def validate(self, done: int) -> None:
        validation = self.run_data.validation
        self.check_params(done)  # a record scored with NaN parameters would be drawn as a real point
        began = time.perf_counter()
        result = self.engine.evaluate(validation.images, validation.labels)
        seconds = time.perf_counter() - began
        split = self.run_data.description["validation_split"]
        self.history.append({"step": done, "accuracy": result["accuracy"], "loss": result["loss"]})
        attention = measure_attention(self.engine.attention_weights, self.statistics_images, self.config.model,
                                      self.engine.params)
        self.log.append({"step": done, "epoch": self.epoch_of(done), "split": split, "loss": result["loss"],
                         "accuracy": result["accuracy"], "learning_rate": self.learning_rate,
                         "images_per_s": result["n"] / max(seconds, 1e-9), "time": round(self.elapsed(), 3),
                         "attention": attention})
        message = (f"step {done} epoch {self.epoch_of(done):.2f}: {split} accuracy {result['accuracy']:.4f} "
                   f"loss {result['loss']:.4f}")
        if self.progress:
            self.bar.write(f"reluattn: {message}", file=self.stdout)
        else:
            print_status(self.stdout, message)
        self.interval_start = time.perf_counter()

    def check_params(self, done: int):
        """The host parameters, after stopping the run if any is NaN or infinite (an update can make them so
        from a finite loss)."""
        params = self.engine.host_params()
        if not all(np.all(np.isfinite(leaf)) for leaf in flatten(params).values()):
            self.non_finite(f"the parameters became non-finite by step {done}")
        return params

    def save(self, done: int) -> None:
        params = self.check_params(done)
        state = {"epoch": self.epoch_of(done), "seed": self.config.seed, "validation": self.history,
                 "elapsed": round(self.elapsed(), 3)}
        config = dict(self.config.to_dict(), data=self.run_data.description, provenance=provenance())
        self.last_checkpoint = save_checkpoint(self.run_dir, done, config, params, self.engine.host_opt_state(),
                                               state, keep=self.config.keep_checkpoints)
        self.interval_start = time.perf_counter()

    def score_test(self) -> dict:
        """The final parameters on the held-out test split (--test-split), once; {} when there is none.
        Nothing is chosen on it: the parameters scored are the run's last, whatever validation said."""
        test = self.run_data.test
        if test is None:
            return {}
        result = self.engine.evaluate(test.images, test.labels)
        return {"test_accuracy": result["accuracy"], "test_loss": result["loss"], "num_test": result["n"]}

    def images_per_s(self) -> float | None:
        return self.timed_images / self.timed_seconds if self.timed_seconds > 0 else None

    def interrupted(self) -> str:
        try:  # what is on disk: a stop during a save's pruning comes after LATEST names the new checkpoint
            self.last_checkpoint = resolve_checkpoint(self.run_dir)
        except CheckpointError:
            pass
        if self.last_checkpoint is None:
            return (f"interrupted before the first checkpoint of {self.run_dir}; to train it again there, delete its "
                    f"metrics.jsonl first (or choose another --out)")
        return (f"interrupted at once; the last checkpoint, {self.last_checkpoint}, is intact. Resume with: "
                f"reluattn train --out {self.run_dir} --resume")

    def stopped(self, signum: int, done: int, total: int) -> TrainResult:
        name = signal.Signals(signum).name
        print(f"reluattn: stopped by {name} at step {done} of {total}; checkpoint saved in {self.last_checkpoint}. "
              f"Resume with: reluattn train --out {self.run_dir} --resume", file=sys.stderr, flush=True)
        return TrainResult(128 + signum, done, total, *best_and_final(self.history), self.last_checkpoint,
                           f"stopped by {name} at step {done}")

    def finish(self, total: int) -> TrainResult:
        line = summary_line(self.config, self.run_dir, total, total, self.history, self.elapsed(), self.images_per_s(),
                        "done")
        best, final = best_and_final(self.history)
        test = self.score_test()
        if test:
            line += f"; test accuracy {test['test_accuracy']:.4f} on {test['num_test']} held-out images"
        write_summary(self.run_dir, {**test,
            "flops_per_image": self.config.model.flops_per_image(),
            "train_flops": self.config.train_flops(total),
            "device": self.engine.device_description,
            "steps": total, "best_val_accuracy": best, "final_val_accuracy": final,
            "wall_time_s": round(self.elapsed(), 3), "images_per_s": self.images_per_s(),
            "checkpoint": str(self.last_checkpoint), "attention": self.config.model.attention.kind,
            "preset": self.config.preset, "summary": line, "provenance": provenance()})
        print_status(self.stdout, line)
        return TrainResult(0, total, total, best, final, self.last_checkpoint, line)


def best_and_final(history: list) -> tuple:
    if not history:
        return None, None
    return max(entry["accuracy"] for entry in history), history[-1]["accuracy"]


def summary_line(config, run_dir, done, total, history, elapsed, images_per_s, status) -> str:
    parts = [f"{status}: {done}/{total} steps, wall time {elapsed:.1f} s"]
    if images_per_s:
        parts.append(f"{images_per_s:.0f} images/s")
    if history:
        best = max(history, key=lambda entry: entry["accuracy"])
        parts.append(f"validation accuracy best {best['accuracy']:.4f} (step {best['step']}), "
                     f"final {history[-1]['accuracy']:.4f}")
    parts.append(f"run {run_dir} ({config.model.attention.kind} attention)")
    return "; ".join(parts)


class StopRequests:
    """Turns SIGINT / SIGTERM into a request the loop honours after the current step. A second signal
    stops at once (KeyboardInterrupt); saved checkpoints are atomic, so nothing already saved is lost."""

    def __init__(self):
        self.signal = None
        self._previous = {}

    def _handle(self, signum, frame):
        if self.signal is not None:
            raise KeyboardInterrupt
        self.signal = signum

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc):
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
