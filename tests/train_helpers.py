"""Shared pieces of the training/CLI tests: a tiny image-folder dataset and the flags of a tiny model.

The dataset has three classes whose images differ in colour (so a one-block ViT learns them in a few
steps), 8x8 RGB PNGs, a train and a test split.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
CLASSES = {"cat": (200, 40, 40), "dog": (40, 200, 40), "eel": (40, 40, 200)}


def make_folder_dataset(root: Path, train_per_class: int = 24, test_per_class: int = 6, side: int = 8) -> Path:
    rng = np.random.default_rng(0)
    for split, count in (("train", train_per_class), ("test", test_per_class)):
        for name, colour in CLASSES.items():
            folder = root / split / name
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(count):
                pixels = np.clip(np.array(colour) + rng.normal(0, 50, (side, side, 3)), 0, 255).astype(np.uint8)
                Image.fromarray(pixels).save(folder / f"{i:03d}.png")
    return root


def make_cifar10_archive(path: Path, per_batch: int = 20) -> Path:
    """A cifar-10-python.tar.gz of the canonical layout (5 training batches, a test batch, the meta file)."""
    import io
    import pickle
    import tarfile
    rng = np.random.default_rng(0)
    with tarfile.open(path, "w:gz") as tar:
        for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch", "batches.meta"]:
            if name == "batches.meta":
                record = {b"label_names": [f"class{k}".encode() for k in range(10)]}
            else:
                record = {b"data": rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8),
                          b"labels": [k % 10 for k in range(per_batch)]}
            payload = pickle.dumps(record)
            member = tarfile.TarInfo(f"cifar-10-batches-py/{name}")
            member.size = len(payload)
            tar.addfile(member, io.BytesIO(payload))
    return path


def tiny_args(data: Path, out: Path, steps: int = 12, **overrides) -> list[str]:
    """`train` flags of a 16-wide, one-block ViT on the tiny dataset."""
    flags = {"--data": data, "--out": out, "--steps": steps, "--dim": 16, "--depth": 1, "--heads": 2,
             "--mlp-dim": 16, "--patch-size": 4, "--batch-size": 8, "--val-split": 12, "--warmup-steps": 0,
             "--crop-padding": 1, "--compute-dtype": "float32", "--lr": 3e-3, "--eval-every": 4,
             "--checkpoint-every": 4, "--log-every": 2}
    flags.update(overrides)
    args = ["train", "--no-progress"]
    for name, value in flags.items():
        if value is True:
            args.append(name)
        elif value is not None:
            args += [name, str(value)]
    return args


def numpy_run(data: Path, out: Path, steps: int = 8, **flags) -> list[str]:
    """tiny_args with the NumPy backend (no compilation: an in-process run takes a fraction of a second)."""
    return tiny_args(data, out, steps=steps, **{"--backend": "numpy", **flags})


# A wrapper around `reluattn` for subprocess tests: KILL_MODE makes the process hit itself with a signal
# at a chosen point, deterministically (no sleeps, no races):
#   flush:<SIG>:<step>       at the first metrics fetch at or after <step> (a moment between checkpoints)
#   checkpoint:<SIG>:<step>  while checkpoint <step> is half written (params.npz done, opt_state.npz not)
WRAPPER = r"""
import os, signal, sys
mode = os.environ.get("KILL_MODE")
if mode:
    where, name, step = mode.split(":")
    signum, step = getattr(signal, name), int(step)
    fired = []

    def fire():
        if not fired:
            fired.append(True)
            os.kill(os.getpid(), signum)

    if where == "flush":
        from reluattn.training.step_loop import StepLoop
        original_flush = StepLoop.flush

        def flush(self):
            if self.pending and self.pending[-1][0] >= step:
                fire()
            original_flush(self)

        StepLoop.flush = flush
    else:
        from reluattn.training import run_dir as checkpoint
        original_write = checkpoint._write_npz

        def write(path, arrays):
            if f"step_{step:08d}" in str(path) and path.name == "opt_state.npz":
                fire()
            original_write(path, arrays)

        checkpoint._write_npz = write
from reluattn.cli import main
sys.exit(main(sys.argv[1:]))
"""


def cli_command(args, cache: Path, kill_mode: str | None = None, extra_env: dict | None = None) -> dict:
    """subprocess keyword arguments that run `reluattn ARGS` in a fresh Python process.

    The processes share `cache` for decoded images and JAX's persistent compilation cache, so only the
    first one of a kind pays for XLA's compilation (the same program gives the same executable)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), RELUATTN_CACHE=str(cache), MPLBACKEND="Agg",
               JAX_COMPILATION_CACHE_DIR=str(cache / "xla"), JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
               JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")
    env.pop("KILL_MODE", None)
    if kill_mode:
        env["KILL_MODE"] = kill_mode
    env.update(extra_env or {})
    return {"args": [sys.executable, "-c", WRAPPER, *map(str, args)], "env": env, "text": True, "cwd": str(ROOT)}


def run_cli(args, cache: Path, kill_mode: str | None = None, extra_env: dict | None = None, timeout: float = 120):
    """Run `reluattn ARGS` in a fresh Python process (see cli_command); returns the CompletedProcess."""
    return subprocess.run(**cli_command(args, cache, kill_mode, extra_env), capture_output=True, timeout=timeout)


def final_arrays(run: Path, name: str = "params.npz") -> dict:
    from reluattn.training.run_dir import resolve_checkpoint
    with np.load(resolve_checkpoint(run) / name) as data:
        return {key: data[key] for key in data.files}


def assert_bit_identical(a: dict, b: dict) -> None:
    assert sorted(a) == sorted(b)
    for key in a:
        assert a[key].dtype == b[key].dtype, key
        assert np.array_equal(a[key], b[key]), f"{key} differs"


# Module-scoped fixtures shared by the CLI and training-loop tests (import them into a test module).
@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return make_folder_dataset(tmp_path_factory.mktemp("folder"))


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """A folder for run_cli's decoded images and compilation cache, shared by a module's processes."""
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module", autouse=True)
def environment(tmp_path_factory):
    """A private data cache and no RELUATTN_DATA, for the module's fixtures as well as its tests."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RELUATTN_CACHE", str(tmp_path_factory.mktemp("cache")))
        patch.delenv("RELUATTN_DATA", raising=False)
        yield


def one_error_line(capsys, argv, code=1) -> str:
    """The one stderr line `reluattn ARGV` ends with (no traceback), checking its exit code."""
    from reluattn.cli import main
    capsys.readouterr()
    assert main(argv) == code
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in lines[0] and "internal error" not in lines[0], lines
    return lines[0]


@pytest.fixture(scope="module")
def finished(data, tmp_path_factory):
    """A finished 8-step NumPy-backend run (checkpoints at 4 and 8)."""
    from reluattn.cli import main
    out = tmp_path_factory.mktemp("finished") / "run"
    assert main(numpy_run(data, out)) == 0
    return out

