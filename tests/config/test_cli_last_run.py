"""`--ckpt_path last` continues this experiment's run, never another one beside it.

The README's sequence with the real `trainer` command: a run on one process, the same YAML
sharded with FSDP on two processes, then `--ckpt_path last` on one process again. "last" is
the single-process run's checkpoint (the FSDP run is another experiment: other processes,
another kind of checkpoint), the FSDP run's folder and config stay untouched, and
`trainer test` leaves the run's config.yaml as the fit wrote it.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.config.test_cli import EXPERIMENT as CLI_EXPERIMENT
from tests.helpers.checkpoints import shuffled
from tests.helpers.reference import make_data, make_model
from trainer import Trainer
from trainer.checkpoint import CheckpointError
from trainer.checkpoint.format import save_atomic

TESTS = Path(__file__).parents[1]
EXPERIMENT = CLI_EXPERIMENT + "  device: cpu\n"  # the CLI tests' experiment, on the CPU
LAUNCH = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID")


def _trainer_command(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH and not k.startswith("SLURM_")}
    env["PYTHONPATH"] = os.pathsep.join([str(folder), str(TESTS.parent)])
    return subprocess.run([shutil.which("trainer") or "trainer", *args], cwd=folder, env=env, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.slow
def test_last_after_the_fsdp_example_resumes_this_experiments_run_and_test_keeps_its_config(tmp_path: Path) -> None:
    shutil.copytree(TESTS / "helpers" / "cli_pkg", tmp_path / "mypkg", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "exp.yaml").write_text(EXPERIMENT)
    assert _trainer_command(tmp_path, "fit", "exp.yaml").returncode == 0
    sharded = _trainer_command(tmp_path, "fit", "exp.yaml", "--trainer.devices", "2", "--trainer.strategy", "fsdp")
    assert sharded.returncode == 0, sharded.stderr[-3000:]
    single, fsdp = tmp_path / "runs" / "default" / "version_0", tmp_path / "runs" / "default" / "version_1"
    assert (fsdp / "last.ckpt").is_dir() and (single / "last.ckpt").is_file()
    fsdp_files = {p: p.read_bytes() for p in fsdp.rglob("*") if p.is_file()}

    dry = _trainer_command(tmp_path, "fit", "exp.yaml", "--ckpt_path", "last", "--dry_run")  # picks the same run
    assert dry.returncode == 0 and f"Resumed from {Path('runs/default/version_0/last.ckpt')}:" in dry.stderr, dry.stderr[-3000:]
    resumed = _trainer_command(tmp_path, "fit", "exp.yaml", "--ckpt_path", "last", "--trainer.max_epochs", "2")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"Resumed from {Path('runs/default/version_0/last.ckpt')}: epoch 1, optimizer step 4" in resumed.stderr
    assert "processes 2 there, 1 here" in resumed.stderr  # why the newer FSDP run was passed over
    assert torch.load(single / "last.ckpt", weights_only=True)["loop"]["global_step"] == 8
    assert {p: p.read_bytes() for p in fsdp.rglob("*") if p.is_file()} == fsdp_files  # untouched, config.yaml too
    assert sorted(p.name for p in (tmp_path / "runs" / "default").iterdir()) == ["version_0", "version_1"]

    config = (single / "config.yaml").read_bytes()
    tested = _trainer_command(tmp_path, "test", "exp.yaml", "--ckpt_path", "last", "--trainer.max_epochs", "7")
    assert tested.returncode == 0, tested.stderr[-3000:]
    assert (single / "config.yaml").read_bytes() == config  # the fit's config, not test's


def _fit(root: Path, ckpt_path: str | None = None, **kwargs: object) -> Trainer:
    run = Trainer(root_dir=root, max_epochs=kwargs.pop("max_epochs", 1), logger=False, enable_progress_bar=False,
                  device="cpu", **kwargs)  # type: ignore[arg-type]
    run.fit(make_model(lr=0.01), shuffled(make_data()), ckpt_path=ckpt_path)
    return run


def test_a_named_runs_checkpoint_of_another_experiment_is_refused_with_what_differs(tmp_path: Path) -> None:
    _fit(tmp_path, run_name="exp", precision="fp32")
    with pytest.raises(CheckpointError, match=r"written by another experiment: precision 'fp32' there, 'bf16' here"):
        _fit(tmp_path, "last", run_name="exp", precision="bf16", max_epochs=2)
    assert torch.load(tmp_path / "default" / "exp" / "last.ckpt", weights_only=True)["loop"]["global_step"] == 10


def test_an_unnamed_run_passes_over_newer_runs_of_other_experiments(tmp_path: Path) -> None:
    _fit(tmp_path, precision="fp32")  # version_0
    _fit(tmp_path, precision="bf16")  # version_1, newer, another experiment
    run = _fit(tmp_path, "last", precision="fp32", max_epochs=2)
    assert run.global_step == 20 and run._run.checkpoints.last_path == tmp_path / "default" / "version_0" / "last.ckpt"
    assert torch.load(tmp_path / "default" / "version_1" / "last.ckpt", weights_only=True)["loop"]["global_step"] == 10
    fresh = _fit(tmp_path, "last", precision="amp")  # no run of this experiment: a new one
    assert fresh.global_step == 10 and fresh._run.checkpoints.last_path.parent.name == "version_2"


def test_a_single_file_never_replaces_a_sharded_folder_nor_the_reverse(tmp_path: Path) -> None:
    folder = tmp_path / "default" / "exp"
    (folder / "last.ckpt").mkdir(parents=True)
    (folder / "last.ckpt" / "trainer_state.ckpt").write_bytes(b"a sharded checkpoint's state")
    with pytest.raises(CheckpointError, match=r"holds last.ckpt as a sharded folder .* Nothing was trained"):
        _fit(tmp_path, run_name="exp")
    assert (folder / "last.ckpt" / "trainer_state.ckpt").read_bytes() == b"a sharded checkpoint's state"
    with pytest.raises(CheckpointError, match=r"is a sharded checkpoint folder .* Nothing was written"):
        save_atomic({"w": torch.ones(1)}, folder / "last.ckpt")
    assert (folder / "last.ckpt").is_dir()


def test_a_failed_write_gives_the_advice_of_its_cause(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def in_the_way(source: object, target: object) -> None:
        raise IsADirectoryError(errno.EISDIR, "Is a directory", str(target))

    monkeypatch.setattr(os, "replace", in_the_way)
    with pytest.raises(OSError) as raised:
        save_atomic({"w": torch.ones(1)}, tmp_path / "x.ckpt")
    message = str(raised.value)
    assert "Free space" not in message and "full" not in message
    assert "is in the way" in message and "Remove or rename what is at that path" in message
    assert not list(tmp_path.iterdir())  # no temporary left


def test_a_newer_run_with_only_weights_files_is_passed_over(tmp_path: Path) -> None:
    import callbacks

    _fit(tmp_path)  # version_0: last.ckpt
    weights = Trainer(root_dir=tmp_path, max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                      device="cpu", callbacks=[callbacks.ModelCheckpoint(save_weights_only=True)])
    weights.fit(make_model(lr=0.01), shuffled(make_data()))
    assert [p.name for p in (tmp_path / "default" / "version_1").rglob("*.ckpt")]  # weights only: can't resume
    run = _fit(tmp_path, "last", max_epochs=2)
    assert run.global_step == 20 and run._run.checkpoints.last_path == tmp_path / "default" / "version_0" / "last.ckpt"
