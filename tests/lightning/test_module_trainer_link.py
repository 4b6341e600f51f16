"""`self._trainer`, Lightning's spelling that projects test before reading `self.trainer`
(`if self._trainer is not None:`): None before a Trainer, the Trainer inside and after a run,
as under Lightning."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

pytest.importorskip("lightning")


def links(pkg: Any) -> list[Any]:
    seen: list[Any] = []

    class Net(pkg.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)
            seen.append(("init", self._trainer is None))

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            seen.append(("step", self._trainer is self.trainer, self.trainer.max_epochs if self._trainer is not None else 50))
            return self.layer(batch[0]).sum()

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    model = Net()
    trainer = pkg.Trainer(max_epochs=2, max_steps=1, logger=False, enable_checkpointing=False,
                          enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(model, DataLoader(TensorDataset(torch.randn(2, 2)), batch_size=2))
    seen.append(("after", model._trainer is trainer))
    return seen


def test_private_trainer_link_reads_as_lightnings() -> None:
    import lightning.pytorch as lightning

    import trainer

    assert links(trainer) == links(lightning) == [("init", True), ("step", True, 2), ("after", True)]
