"""DeviceStatsMonitor under DDP: `torchrun --nproc_per_node=2 device_stats_worker.py OUT`.

A fake `psutil` gives fixed CPU numbers. Every rank must get through fit; rank 0 writes the
statistics to its CSV logger. Each rank writes OUT/rank{r}.txt with its global step when done.
"""

from __future__ import annotations

import importlib.machinery
import sys
import types
from pathlib import Path

import torch
from torch.utils.data import DataLoader

from callbacks import DeviceStatsMonitor
from tests.helpers.reference import TinyNet, make_data
from trainer import Trainer
from trainer.loggers import CSVLogger

OUT = Path(sys.argv[1])


def fake_psutil() -> None:
    fake = types.ModuleType("psutil")
    fake.__spec__ = importlib.machinery.ModuleSpec("psutil", None)
    fake.virtual_memory = lambda: types.SimpleNamespace(percent=41.5)  # type: ignore[attr-defined]
    fake.swap_memory = lambda: types.SimpleNamespace(percent=2.0)  # type: ignore[attr-defined]
    fake.cpu_percent = lambda: 12.5  # type: ignore[attr-defined]
    sys.modules["psutil"] = fake


def main() -> None:
    fake_psutil()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    trainer = Trainer(max_steps=4, strategy="ddp", device="cpu", logger=CSVLogger(str(OUT / "logs")),
                      log_every_n_steps=2, enable_checkpointing=False, enable_progress_bar=False,
                      num_sanity_val_steps=0, callbacks=[DeviceStatsMonitor()])
    trainer.fit(TinyNet(dropout=0.0), DataLoader(make_data(32), batch_size=4))
    (OUT / f"rank{trainer.strategy.rank}.txt").write_text(str(trainer.global_step))


if __name__ == "__main__":
    main()
