"""SLURM's warning signal before fit and during its sanity check, without a scheduler (a fake
`scontrol` on PATH, `SLURM_JOB_ID` set): the job stops with a checkpoint, or without one when
nothing was trained, and is requeued; never killed. tests/strategies/test_cluster.py does the
same through the real scheduler.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from tests.helpers.launch import ROOT
from tests.helpers.reference import make_data, make_model, weights
from trainer import Callback, Trainer
from trainer.loops import early_signals
from trainer.checkpoint import load_checkpoint
from trainer.strategies.requeue import REQUEUED_ENV

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals, SLURM")

#: Run as `python -c` with SLURM_JOB_ID set: USR1 right after `import trainer`, then a fit
#: with checkpoints; USR1 again between fits, then a fit without checkpoints (another job id).
SCRIPT = """
import json, os, signal, sys
import trainer
os.kill(os.getpid(), signal.SIGUSR1)  # the job is preempted while the script is still starting
from torch.utils.data import DataLoader
from tests.helpers.reference import make_data, make_model
from trainer import Trainer
results = []
for job, checkpointing in (("4801", True), ("4802", False)):
    os.environ["SLURM_JOB_ID"] = job
    run = Trainer(max_epochs=2, logger=False, enable_progress_bar=False, root_dir=sys.argv[1],
                  enable_checkpointing=checkpointing)
    run.fit(make_model(), DataLoader(make_data(), batch_size=4))
    results.append({"global_step": run.global_step, "log_dir": str(run.log_dir)})
    os.kill(os.getpid(), signal.SIGUSR1)  # outside fit: noted for the next one
print(json.dumps(results))
"""


def fake_scontrol(tmp: Path) -> tuple[dict[str, str], Path]:
    folder, calls = tmp / "bin", tmp / "scontrol_calls.txt"
    folder.mkdir(exist_ok=True)
    (folder / "scontrol").write_text(f'#!/bin/sh\necho "$@" >> "{calls}"\n')
    (folder / "scontrol").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update(PATH=f"{folder}{os.pathsep}{env.get('PATH', '')}", PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    return env, calls


def test_a_warning_signal_while_the_script_starts_stops_fit_at_once_and_requeues(tmp_path):
    env, calls = fake_scontrol(tmp_path)
    env.update(SLURM_JOB_ID="4801", SLURM_JOB_NAME="train")
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "runs")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]  # not killed by SIGUSR1's default action
    with_checkpoints, without = json.loads(done.stdout.strip().splitlines()[-1])
    assert with_checkpoints["global_step"] == without["global_step"] == 0  # the stop came before the first step
    assert done.stderr.count("SIGUSR1 arrived before fit") == 2
    assert calls.read_text().splitlines() == ["requeue 4801", "requeue 4802"]
    # a checkpoint of the untrained start, which the requeued job resumes
    assert load_checkpoint(Path(with_checkpoints["log_dir"]) / "last.ckpt")["loop"]["global_step"] == 0
    # nothing to save and nothing lost: requeued all the same, starting where this one did
    assert not (Path(without["log_dir"]) / "last.ckpt").exists() and "starts where this one did" in done.stderr


def test_a_trainer_that_does_not_handle_sigusr1_gives_it_its_default_back(tmp_path):
    """`requeue_signal=None`: a SIGUSR1 noted at start-up is delivered again, and ends the
    process as it would have without `import trainer`."""
    env, _ = fake_scontrol(tmp_path)
    env["SLURM_JOB_ID"] = "4802"
    script = ("import os, signal, trainer\nos.kill(os.getpid(), signal.SIGUSR1)\nprint('noted', flush=True)\n"
              "trainer.Trainer(requeue_signal=None, logger=False)\nprint('survived', flush=True)\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == -signal.SIGUSR1 and done.stdout.split() == ["noted"], (done.stdout, done.stderr[-2000:])


def test_the_early_handler_is_installed_inside_slurm_only_and_never_over_a_handler_of_yours(monkeypatch):
    previous = signal.getsignal(signal.SIGUSR2)
    try:
        signal.signal(signal.SIGUSR2, signal.SIG_DFL)
        early_signals.install([signal.SIGUSR2], environ={})  # outside SLURM: untouched
        assert signal.getsignal(signal.SIGUSR2) is signal.SIG_DFL
        mine = lambda signum, frame: None  # noqa: E731
        signal.signal(signal.SIGUSR2, mine)
        early_signals.install([signal.SIGUSR2], environ={"SLURM_JOB_ID": "7"})  # yours stays
        assert signal.getsignal(signal.SIGUSR2) is mine
        signal.signal(signal.SIGUSR2, signal.SIG_DFL)
        early_signals.install([signal.SIGUSR2], environ={"SLURM_JOB_ID": "7"})
        os.kill(os.getpid(), signal.SIGUSR2)  # noted, not fatal
        assert early_signals.take([signal.SIGUSR1]) is None
        assert early_signals.take([signal.SIGUSR2]) == signal.SIGUSR2
        assert early_signals.take([signal.SIGUSR2]) is None  # taken once
    finally:
        signal.signal(signal.SIGUSR2, previous)
        early_signals._installed.discard(signal.SIGUSR2)


class SignalInSanityCheck(Callback):
    def on_sanity_check_start(self, trainer: Any, module: Any) -> None:
        os.kill(os.getpid(), signal.SIGUSR1)


def test_a_warning_signal_during_the_sanity_check_stops_before_training_and_the_resume_is_exact(monkeypatch, tmp_path):
    env, calls = fake_scontrol(tmp_path)
    monkeypatch.setenv("PATH", env["PATH"])
    monkeypatch.setenv("SLURM_JOB_ID", "4803")
    monkeypatch.setenv(REQUEUED_ENV, "")  # restored after the test: the run sets it

    def run(callbacks: list[Callback], ckpt_path: str | None, root: Path) -> tuple[Trainer, dict[str, torch.Tensor]]:
        torch.manual_seed(0)
        model = make_model(dropout=0.1)
        trainer = Trainer(max_epochs=2, logger=False, enable_progress_bar=False, root_dir=root, seed=3, callbacks=callbacks)
        trainer.fit(model, DataLoader(make_data(), batch_size=4, shuffle=True), DataLoader(make_data(8, seed=1), batch_size=4),
                    ckpt_path=ckpt_path)
        return trainer, weights(model)

    stopped, _ = run([SignalInSanityCheck()], "last", tmp_path / "runs")
    assert stopped.global_step == 0 and calls.read_text().splitlines() == ["requeue 4803"]
    assert load_checkpoint(stopped.log_dir / "last.ckpt")["loop"]["global_step"] == 0
    monkeypatch.setenv(REQUEUED_ENV, "")  # the requeued job is a new process
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        resumed, got = run([], "last", tmp_path / "runs")
    assert not [w for w in caught if "already holds last.ckpt" in str(w.message)]  # a resume, not a restart
    monkeypatch.delenv("SLURM_JOB_ID")
    _, expected = run([], None, tmp_path / "uninterrupted")
    assert resumed.global_step == 20 and resumed.log_dir == stopped.log_dir
    for key in expected:
        assert torch.equal(got[key], expected[key]), key
