"""`max_time` counts training time from the start of training, as Lightning's Timer does: the
sanity check before it is not counted, so a run whose sanity check is slow still trains until
its time is up. Both run in this process on the same fake clock (a step "takes" ten seconds)."""

from __future__ import annotations

import time
from types import ModuleType
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

pytest.importorskip("lightning")


def frameworks() -> dict[str, ModuleType]:
    import lightning

    import trainer

    return {"ours": trainer, "lightning": lightning}


def steps_within(framework: str, clock: list[float], sanity_seconds: float) -> int:
    L = frameworks()[framework]

    class Model(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return self.layer(batch[0]).pow(2).mean()

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            if self.trainer.sanity_checking:
                clock[0] += sanity_seconds  # a slow first look at the validation set
            self.log("v", self.layer(batch[0]).sum())

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    class Tick(L.Callback):
        def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            clock[0] += 10.0

    data = TensorDataset(torch.randn(16, 2))
    trainer = L.Trainer(max_time={"minutes": 1}, max_epochs=10, limit_val_batches=1, num_sanity_val_steps=1,
                        logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        callbacks=[Tick()])
    trainer.fit(Model(), DataLoader(data, batch_size=4), DataLoader(data, batch_size=4))
    return int(trainer.global_step)


@pytest.mark.parametrize("sanity_seconds", [0.0, 100.0])
def test_max_time_does_not_count_the_sanity_check(sanity_seconds: float, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    ours = steps_within("ours", clock, sanity_seconds)
    theirs = steps_within("lightning", clock, sanity_seconds)
    assert ours == theirs == 6  # 6 steps of 10 s fill the minute, whatever the sanity check took
