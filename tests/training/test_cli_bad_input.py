"""Every bad input gets one line on stderr saying what is wrong, a non-zero exit code and no traceback;
`--debug` shows the traceback instead."""

import errno
import json
import shutil

import pytest

from reluattn.cli import main
from reluattn.training import run_dir as checkpoint
from reluattn.training.run_dir import list_checkpoints, load_checkpoint
from train_helpers import make_cifar10_archive, tiny_args
from train_helpers import data, environment  # noqa: F401  (module fixtures)


@pytest.fixture(scope="module")
def trained(data, tmp_path_factory):
    """A finished 4-step NumPy-backend run (its checkpoints are copied and damaged below)."""
    out = tmp_path_factory.mktemp("trained") / "run"
    assert main(tiny_args(data, out, steps=4, **{"--backend": "numpy"})) == 0
    return out


def fails_with_one_line(capsys, argv, *fragments, code=1):
    """Run the CLI, expect exit `code` and exactly one stderr line holding every fragment; return it."""
    capsys.readouterr()
    assert main(argv) == code
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert "Traceback" not in captured.err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def test_a_start_refused_at_data_loading_leaves_no_run_folder(capsys, tmp_path):
    out = tmp_path / "run"
    fails_with_one_line(capsys, tiny_args(tmp_path / "missing.zip", out), "missing.zip")
    assert not out.exists()


def test_missing_archive(capsys, tmp_path):
    fails_with_one_line(capsys, tiny_args(tmp_path / "cifar-10-python.tar.gz", tmp_path / "run"),
                        "does not exist", "--data")


def test_truncated_archive(capsys, tmp_path):
    whole = make_cifar10_archive(tmp_path / "whole.tar.gz")
    archive = tmp_path / "cifar-10-python.tar.gz"
    archive.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])  # a download cut off half-way
    fails_with_one_line(capsys, tiny_args(archive, tmp_path / "run"), str(archive), "truncated")


def test_cifar_archive_trains(capsys, tmp_path):
    """The same command on the intact archive works (so the failure above is the truncation)."""
    archive = make_cifar10_archive(tmp_path / "cifar-10-python.tar.gz")
    assert main(tiny_args(archive, tmp_path / "run", steps=2, **{"--backend": "numpy", "--val-split": 20})) == 0
    assert "on 80 images (cifar10)" in capsys.readouterr().out


def test_image_folder_without_classes(capsys, tmp_path):
    (tmp_path / "empty" / "train").mkdir(parents=True)
    fails_with_one_line(capsys, tiny_args(tmp_path / "empty", tmp_path / "run"), "no JPEG/PNG images")


def test_unreadable_image(capsys, data, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(data, broken)
    (broken / "train" / "dog" / "005.png").write_bytes(b"not a png at all")
    fails_with_one_line(capsys, tiny_args(broken, tmp_path / "run"), "005.png")


def test_unknown_attention_kind(capsys, data, tmp_path):
    fails_with_one_line(capsys, tiny_args(data, tmp_path / "run", **{"--attention": "cosine"}),
                        "--attention", "cosine", code=2)


def test_invalid_model_shape(capsys, data, tmp_path):
    fails_with_one_line(capsys, tiny_args(data, tmp_path / "run", **{"--dim": 10, "--heads": 3}),
                        "reluattn train: --dim (10) must be divisible by --heads (3)", code=2)


@pytest.mark.parametrize("flag, value, message", [
    ("--batch-size", 0, "--batch-size must be >= 1, got 0"),
    ("--attention-reg-weight", 1e39, "--attention-reg-weight must be below 3.403e+38 (the largest float32)"),
    ("--lr", -1, "--lr must be"),
])
def test_bad_values_name_their_flag_not_a_config_field(capsys, data, tmp_path, flag, value, message):
    line = fails_with_one_line(capsys, tiny_args(data, tmp_path / "run", **{flag: value}), message, code=2)
    assert "Config." not in line and "overflow" not in line
    assert not (tmp_path / "run").exists()


def test_an_unknown_flag_points_at_its_commands_help(capsys, data, tmp_path):
    fails_with_one_line(capsys, tiny_args(data, tmp_path / "run") + ["--frobnicate"],
                        "reluattn train: unrecognized arguments: --frobnicate (see reluattn train --help)", code=2)


def test_block_size_without_the_blocked_kernel_is_refused(capsys, trained, data, tmp_path):
    fails_with_one_line(capsys, tiny_args(data, tmp_path / "run", **{"--impl": "dense", "--block-size": 7}),
                        "--block-size applies only with --impl blocked", code=2)
    fails_with_one_line(capsys, ["evaluate", "--checkpoint", str(trained), "--block-size", "7"],
                        "--block-size applies only with --impl blocked")


def test_a_patch_size_is_checked_against_the_data_not_the_presets_image_size(capsys, data, tmp_path):
    # The 8-pixel tiny dataset: patch 3 does not divide it (said of the data, not of the preset's 32);
    # upsampled to 24, patch 12 does (the preset's 32 is not a multiple of 12, and must not matter).
    line = fails_with_one_line(capsys, tiny_args(data, tmp_path / "a", **{"--patch-size": 3}),
                               "the images are 8x8 pixels, not divisible by the patch size 3")
    assert "32" not in line
    assert main(tiny_args(data, tmp_path / "b", steps=2, **{"--backend": "numpy", "--image-size": 24,
                                                             "--patch-size": 12})) == 0


def test_an_image_size_beyond_the_limit_or_memory_is_refused_before_upsampling(capsys, data, tmp_path,
                                                                                monkeypatch):
    fails_with_one_line(capsys, tiny_args(data, tmp_path / "a", **{"--image-size": 32000, "--patch-size": 4}),
                        "--image-size 32000 is over the 1024-pixel limit", "RELUATTN_MAX_IMAGE_SIDE")
    from reluattn.training import run_data
    monkeypatch.setattr(run_data, "memory_available_bytes", lambda: 10 ** 6)  # 1 MB free
    fails_with_one_line(capsys, tiny_args(data, tmp_path / "b", **{"--image-size": 512, "--patch-size": 64}),
                        "--image-size 512 would hold 72 images of 512x512x3 bytes", "choose a smaller --image-size")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_checkpoint_config_that_does_not_parse(capsys, trained, data, tmp_path):
    damaged = tmp_path / "run"
    shutil.copytree(trained, damaged)
    (list_checkpoints(damaged)[-1] / "config.json").write_text('{"model": {"dim": 16,')
    fails_with_one_line(capsys, ["evaluate", "--checkpoint", str(damaged), "--data", str(data)],
                        "config.json", "corrupted")
    fails_with_one_line(capsys, tiny_args(data, damaged, steps=4, **{"--backend": "numpy"}) + ["--resume"],
                        "config.json", "corrupted")


def test_checkpoint_arrays_that_do_not_fit_the_config(capsys, trained, data, tmp_path):
    damaged = tmp_path / "run"
    shutil.copytree(trained, damaged)
    config_path = list_checkpoints(damaged)[-1] / "config.json"
    config = json.loads(config_path.read_text())
    config["model"]["mlp_dim"] = 32
    config_path.write_text(json.dumps(config))
    state_path = config_path.with_name("state.json")  # as a checkpoint written before config.json was bound
    state_path.write_text(json.dumps({k: v for k, v in json.loads(state_path.read_text()).items()
                                      if k != "config_sha256"}))
    fails_with_one_line(capsys, ["evaluate", "--checkpoint", str(damaged), "--data", str(data)],
                        "params.npz", "do not fit", "mlp/fc1/w has shape (16, 16), expected (16, 32)")


def test_truncated_parameter_file(capsys, trained, data, tmp_path):
    damaged = tmp_path / "run"
    shutil.copytree(trained, damaged)
    params = list_checkpoints(damaged)[-1] / "params.npz"
    params.write_bytes(params.read_bytes()[:100])
    fails_with_one_line(capsys, ["evaluate", "--checkpoint", str(damaged), "--data", str(data), "--json"],
                        "params.npz", "corrupted")
    assert capsys.readouterr().out == ""


def test_missing_checkpoint(capsys, data, tmp_path):
    fails_with_one_line(capsys, ["evaluate", "--checkpoint", str(tmp_path / "nothing"), "--data", str(data)],
                        "no checkpoint")
    fails_with_one_line(capsys, tiny_args(data, tmp_path / "nothing") + ["--resume"], "no checkpoint to resume")


def test_full_disk_while_checkpointing_keeps_what_was_saved(capsys, data, tmp_path, monkeypatch):
    out = tmp_path / "run"
    real_write = checkpoint._write_npz
    calls = []

    def write_until_the_disk_fills(path, arrays):  # 2 npz files per checkpoint: the 2nd checkpoint fails
        calls.append(path)
        if len(calls) > 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(path, arrays)

    monkeypatch.setattr(checkpoint, "_write_npz", write_until_the_disk_fills)
    fails_with_one_line(capsys, tiny_args(data, out, steps=12, **{"--backend": "numpy"}), "disk is full",
                        "earlier checkpoints are intact")
    monkeypatch.undo()
    assert [path.name for path in list_checkpoints(out)] == ["step_00000004"]
    assert load_checkpoint(out)["state"]["step"] == 4
    assert not [path for path in (out / "checkpoints").iterdir() if path.name.startswith(".tmp")]


def test_usage_errors(capsys, data, tmp_path):
    fails_with_one_line(capsys, ["frobnicate"], "invalid choice", code=2)
    fails_with_one_line(capsys, tiny_args(data, tmp_path / "run") + ["--epochs", "3"], "--epochs or --steps",
                        code=2)
    fails_with_one_line(capsys, ["evaluate", "--data", str(data)], "--checkpoint", code=2)
    fails_with_one_line(capsys, ["train", "--resume"], "--out", code=2)


def test_resume_with_another_preset(capsys, trained, data):
    fails_with_one_line(capsys, ["train", "--resume", "--out", str(trained), "--preset", "gpu-tiny",
                                 "--data", str(data)], "was trained with preset 'cpu-small'", code=2)


def test_debug_shows_the_traceback(data, tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        main(["--debug"] + tiny_args(tmp_path / "missing.tar.gz", tmp_path / "run"))


def test_a_data_notice_is_one_line_on_the_command_line(capsys):
    import warnings

    from reluattn.cli import _one_line_data_warnings
    from reluattn.data import DataWarning
    others = []
    show = _one_line_data_warnings(lambda *args: others.append(args[1]))
    show(DataWarning("the cached images do not match\n  the hash stored with them; decoding again"), DataWarning,
         "/somewhere/cache.py", 12)
    show(UserWarning("something else"), UserWarning, "x.py", 1)
    assert capsys.readouterr().err == ("reluattn: warning: the cached images do not match the hash stored with "
                                       "them; decoding again\n")
    assert others == [UserWarning]
    assert warnings.showwarning is not show  # main() installs it only while a command runs


def test_a_stop_prints_interrupted_and_ignores_further_ctrl_c(monkeypatch, capsys):
    """Audit K1/K5: a bare KeyboardInterrupt printed an empty 'reluattn: ', and a further Ctrl-C during the
    exit could land in tqdm's destructor; now the line says 'interrupted' and SIGINT is ignored after it."""
    import signal
    from reluattn import cli

    def stop(args):
        raise KeyboardInterrupt

    monkeypatch.setitem(cli.COMMANDS, "plot", stop)
    previous = signal.getsignal(signal.SIGINT)
    try:
        assert cli.main(["plot", "somewhere"]) == 130
        assert capsys.readouterr().err.strip() == "reluattn: interrupted"
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)
