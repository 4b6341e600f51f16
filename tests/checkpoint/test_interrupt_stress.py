"""Interrupt stress: SIGINT and SIGTERM at seeded random instants of a real process, each run
resumed and compared with the uninterrupted one. A clean cut must resume
bit-exactly; a cut that isn't clean must say so when resumed. Nothing may be lost: a
last.ckpt always exists after an interrupt, whatever the instant."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
import torch

from tests.checkpoint.test_resume_matrix import EPOCHS, make_loader, new_model
from trainer import Trainer
from trainer.checkpoint import load_checkpoint

ROOT = Path(__file__).resolve().parents[2]
CHILD = """
import sys, time, torch
sys.path.insert(0, {root!r})
from tests.checkpoint.test_resume_matrix import EPOCHS, make_loader, new_model
from tests.helpers.reference import TinyNet
from trainer import Callback, Trainer

class Slow(Callback):
    def on_train_start(self, trainer, module):
        print("ready", flush=True)  # fit's signal handling is in place from here on

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        time.sleep(0.02)  # room for the signal to land anywhere in the loop

model = new_model()
torch.manual_seed(1)
run = Trainer(max_epochs=EPOCHS, callbacks=[Slow()], root_dir={out!r}, logger=False, enable_progress_bar=False,
              num_sanity_val_steps=0)
try:
    run.fit(model, make_loader("shuffle"), make_loader("sequential"))
except KeyboardInterrupt:
    sys.exit(130)
"""


def uninterrupted() -> torch.nn.Module:
    """The child's run, never interrupted (its validation draws from the random streams)."""
    model = new_model()
    torch.manual_seed(1)
    Trainer(max_epochs=EPOCHS, logger=False, enable_checkpointing=False, enable_progress_bar=False,
            num_sanity_val_steps=0).fit(model, make_loader("shuffle"), make_loader("sequential"))
    return model


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_interrupt_at_a_random_instant_resumes_exactly_or_says_why(tmp_path: Path, signum: int, seed: int):
    child = subprocess.Popen([sys.executable, "-c", CHILD.format(root=str(ROOT), out=str(tmp_path))],
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    time.sleep(random.Random(seed).uniform(0.0, 0.3))
    child.send_signal(signum)
    child.wait(timeout=60)
    found = list(tmp_path.rglob("last.ckpt"))
    assert len(found) == 1, "an interrupt must never lose the run"
    saved = load_checkpoint(found[0])
    torch.manual_seed(123)
    resumed = new_model()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        Trainer(max_epochs=EPOCHS, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                num_sanity_val_steps=0).fit(resumed, make_loader("shuffle"), make_loader("sequential"), ckpt_path=found[0])
    said = [str(w.message) for w in caught if "clean cut" in str(w.message)]
    if saved["cut"]["clean"]:
        assert not said
        reference = uninterrupted()
        assert all(torch.equal(a, b) for a, b in zip(reference.state_dict().values(), resumed.state_dict().values()))
    else:
        assert said and saved["cut"]["reason"] in said[0]
