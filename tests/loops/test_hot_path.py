"""No host synchronisation per step from the framework, and a light `import trainer`
(the rules of the imports themselves are in tests/test_house.py)."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch

from tests.helpers.reference import loader, make_data, make_model
from trainer import Trainer

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = str(ROOT / "trainer")
READS = ("item", "tolist", "cpu", "numpy", "__float__", "__int__", "__bool__")


@pytest.fixture
def host_reads(monkeypatch):
    """Count host reads of tensors made directly from the framework's own code."""
    counts: Counter[str] = Counter()
    for name in READS:
        original = getattr(torch.Tensor, name)

        def wrapper(self, *args, __name=name, __original=original, **kwargs):
            caller = sys._getframe(1).f_code.co_filename
            if caller.startswith(PACKAGE):
                counts[__name] += 1
            return __original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, wrapper)
    return counts


@pytest.mark.parametrize("precision", ["fp32", "amp", "bf16"])
def test_host_reads_happen_only_at_logging_intervals(host_reads, precision, tmp_path):
    steps, every = 20, 5
    trainer = Trainer(precision=precision, max_steps=steps, log_every_n_steps=every, accumulate_grad_batches=2,
                      gradient_clip_val=1.0, root_dir=tmp_path, enable_progress_bar=False, enable_checkpointing=False,
                      device="cpu")
    trainer.fit(make_model(), loader(make_data(200)))
    assert trainer.global_step == steps
    reads = dict(host_reads)
    # One batched read (a single .tolist() of a stacked tensor) per logging interval.
    assert reads.pop("tolist", 0) == steps // every
    if precision == "amp":
        assert reads == {}  # the GradScaler's own skip decision is the only per-step read
    else:
        # fp32/bf16: exactly one read of the window's "loss is finite" flag per optimizer
        # step, so a non-finite loss never reaches the weights (docs/design.md, Decisions).
        assert reads == {"__float__": steps}


def test_import_is_light():
    code = "import sys, trainer; print(' '.join(m for m in ('tensorboard', 'torch.utils.tensorboard', 'callbacks', 'yaml') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == []  # tensorboard is imported when first used (tqdm comes with torch itself)
