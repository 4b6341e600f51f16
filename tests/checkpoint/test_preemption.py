"""Crash safety and preemption, with real processes and real signals.

* SIGKILL at varying moments of a loop that saves every step: the file always loads
  (weights_only) with consistent contents, at most one stale temporary is left, and the
  next save clears it.
* SIGTERM during training: the current optimizer step finishes, last.ckpt is written,
  the process exits 0, and `ckpt_path="last"` continues to weights equal to a run that
  was never stopped.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from trainer.checkpoint import FORMAT, FORMAT_VERSION, load_checkpoint, save_atomic

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

ROOT = Path(__file__).resolve().parents[2]

SAVER = """
import sys, torch
from pathlib import Path
from trainer.checkpoint import FORMAT, FORMAT_VERSION, save_atomic
path, ready = sys.argv[1], Path(sys.argv[2])
weights = torch.zeros(1_500_000)
step = 0
while True:
    step += 1
    weights.fill_(step)
    save_atomic({"format": FORMAT, "format_version": FORMAT_VERSION, "step": step, "w": weights}, path)
    if step == 2:
        ready.touch()
"""

TRAINER = """
import sys, time, torch
from pathlib import Path
from tests.helpers.checkpoints import shuffled, trainer
from tests.helpers.reference import make_data, make_model
from trainer import Callback
torch.set_num_threads(1)
root, mode, out, handshake = sys.argv[1], sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4])

class Handshake(Callback):
    # Inside step 6 tell the parent, then hold the step until its SIGTERM has arrived,
    # so the stop lands inside step 6 on every machine.
    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        if trainer.global_step == 5:
            handshake.touch()
            deadline = time.monotonic() + 60
            while not trainer.should_stop and time.monotonic() < deadline:
                time.sleep(0.01)

model = make_model(seed=0 if mode != "resume" else 99)
torch.manual_seed(1 if mode != "resume" else 1234)
callbacks = [Handshake()] if mode == "first" else []
run = trainer(Path(root), max_epochs=2, accumulate_grad_batches=2, callbacks=callbacks)
run.fit(model, shuffled(make_data()), ckpt_path="last" if mode == "resume" else None)
torch.save({k: v for k, v in model.state_dict().items()}, out)
print("global_step", run.global_step)
"""


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def _wait_for(path: Path, process: subprocess.Popen, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.005)


def test_sigkill_during_saves_never_breaks_the_checkpoint(tmp_path):
    script = tmp_path / "saver.py"
    script.write_text(SAVER)
    target = tmp_path / "ckpts" / "last.ckpt"
    for attempt, delay in enumerate([0.0, 0.011, 0.023, 0.047, 0.09, 0.17]):
        ready = tmp_path / f"ready{attempt}"
        child = subprocess.Popen([sys.executable, str(script), str(target), str(ready)], cwd=ROOT, env=_env(),
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            _wait_for(ready, child)
            time.sleep(delay)
        finally:
            child.send_signal(signal.SIGKILL)
            child.communicate()
        assert child.returncode == -signal.SIGKILL
        state = load_checkpoint(target)  # weights_only; CRC-checked
        assert state["step"] >= 2 and torch.equal(state["w"], torch.full((1_500_000,), float(state["step"])))
        temporaries = [p for p in target.parent.iterdir() if p.name.endswith(".tmp")]
        assert len(temporaries) <= 1, temporaries
    save_atomic({"format": FORMAT, "format_version": FORMAT_VERSION}, target)
    assert [p.name for p in target.parent.iterdir()] == ["last.ckpt"]


def _run(script: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(script), *args], cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=120)


def test_sigterm_finishes_the_step_writes_last_and_resumes_exactly(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(TRAINER)
    root, handshake = tmp_path / "runs", tmp_path / "at_step_5"
    child = subprocess.Popen([sys.executable, str(script), str(root), "first", str(tmp_path / "first.pt"), str(handshake)],
                             cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(handshake, child)
        child.send_signal(signal.SIGTERM)
        out, err = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 0, err
    assert "global_step 6" in out  # step 6 was finished, and nothing after it
    [last] = root.glob("**/last.ckpt")
    saved = load_checkpoint(last)
    assert saved["loop"]["global_step"] == 6 and saved["loop"]["batches_done"] == 2 and saved["cut"]["clean"]

    resumed = _run(script, str(root), "resume", str(tmp_path / "resumed.pt"), str(tmp_path / "unused"))
    assert resumed.returncode == 0, resumed.stderr
    assert "global_step 10" in resumed.stdout
    full = _run(script, str(tmp_path / "full_runs"), "full", str(tmp_path / "full.pt"), str(tmp_path / "unused"))
    assert full.returncode == 0, full.stderr
    expected = torch.load(tmp_path / "full.pt", weights_only=True)
    got = torch.load(tmp_path / "resumed.pt", weights_only=True)
    assert expected.keys() == got.keys()
    for key in expected:
        assert torch.equal(expected[key], got[key]), key
