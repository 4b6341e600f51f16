"""LearningRateMonitor at step intervals, as Lightning's: before the batch of each logging
step it records the rate that step will use, at the step count so far; under accumulation
every micro-batch of that window records. `lrs` and the (step, value) pairs written to the
CSV logger (each pair once) are compared with Lightning's in this process."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

pytest.importorskip("lightning")


def monitored(framework: str, root: Path, interval: str | None, accumulate: int, every: int,
              manual: bool = False) -> tuple[Any, list[Any]]:
    if framework == "ours":
        import callbacks as cbs
        import trainer as L
        from trainer.loggers import CSVLogger
    else:
        import lightning as L  # type: ignore[no-redef]
        from lightning.pytorch import callbacks as cbs  # type: ignore[no-redef]
        from lightning.pytorch.loggers import CSVLogger  # type: ignore[no-redef]

    class Model(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)
            self.automatic_optimization = not manual

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            loss = self.layer(batch[0]).pow(2).mean()
            if manual:  # the run's steps are its batches (Lightning's logging step), over epochs
                optimizer = self.optimizers()
                self.manual_backward(loss)
                optimizer.step()
                optimizer.zero_grad()
                self.lr_schedulers().step()
            return loss

        def configure_optimizers(self) -> Any:
            optimizer = torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)
            scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1, gamma=0.5)
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    monitor = cbs.LearningRateMonitor(logging_interval=interval, log_momentum=True)
    torch.manual_seed(0)
    data = DataLoader(TensorDataset(torch.randn(24, 2)), batch_size=4)
    trainer = L.Trainer(max_epochs=2, **({} if manual else {"accumulate_grad_batches": accumulate}), log_every_n_steps=every, callbacks=[monitor],
                        logger=CSVLogger(root / framework, name="csv", version=0), enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Model(), data)
    with open(root / framework / "csv" / "version_0" / "metrics.csv") as file:
        written = [(int(row["step"]), float(row["lr-SGD"])) for row in csv.DictReader(file) if row.get("lr-SGD")]
    return monitor.lrs, sorted(set(written))  # Lightning's CSV repeats a row per micro-batch: its rows, not the values


@pytest.mark.parametrize(("interval", "accumulate", "every"), [(None, 1, 1), ("step", 1, 2), (None, 2, 1), (None, 3, 2)])
def test_step_interval_records_lightnings_values_at_lightnings_steps(interval: str | None, accumulate: int, every: int,
                                                                     tmp_path: Path) -> None:
    ours = monitored("ours", tmp_path, interval, accumulate, every)
    theirs = monitored("lightning", tmp_path, interval, accumulate, every)
    assert ours == theirs
    assert ours[0]["lr-SGD"][0] == 0.1 * 0.5 ** (every - 1)  # the rate the first logging step uses, not the one after it


def test_manual_optimization_records_at_the_runs_batch_count(tmp_path: Path) -> None:
    ours = monitored("ours", tmp_path, "step", 1, 2, manual=True)
    theirs = monitored("lightning", tmp_path, "step", 1, 2, manual=True)
    assert ours == theirs and [step for step, _ in ours[1]] == [1, 3, 5, 7, 9, 11]
