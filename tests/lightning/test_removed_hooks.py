"""A module still written for Lightning 1 (`training_epoch_end(self, outputs)`,
`validation_epoch_end`, `test_epoch_end`): Lightning 2 refuses to run it, naming the hook and
its replacement, before any batch is read; so does this package, for the same stages. Before,
the hook was silently never called: an epoch metric computed there was never logged.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import trainer as L

lightning = pytest.importorskip("lightning")


class Counted(DataLoader):
    """Counts the batches read."""

    reads = 0

    def __iter__(self) -> Any:
        for batch in super().__iter__():
            Counted.reads += 1
            yield batch


def module_with(hook: str, base: type) -> Any:
    class Legacy(base):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return self.layer(batch[0]).sum()

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            self.log("v", self.layer(batch[0]).sum())

        def test_step(self, batch: Any, batch_idx: int) -> None:
            self.log("t", self.layer(batch[0]).sum())

        def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return self.layer(batch[0])

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    setattr(Legacy, hook, lambda self, outputs: None)
    return Legacy()


def attempt(framework: Any, hook: str, stage: str) -> BaseException | None:
    model = module_with(hook, framework.LightningModule)
    trainer = framework.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False,
                                enable_model_summary=False, max_epochs=1, accelerator="cpu", num_sanity_val_steps=0)
    loader = Counted(TensorDataset(torch.randn(4, 2)), batch_size=2)
    Counted.reads = 0
    try:
        if stage == "fit":
            trainer.fit(model, loader, loader)
        else:
            getattr(trainer, stage)(model, loader)
    except NotImplementedError as error:
        assert Counted.reads == 0  # before any work
        return error
    return None


CASES = [("training_epoch_end", "fit"), ("validation_epoch_end", "fit"), ("validation_epoch_end", "validate"),
         ("test_epoch_end", "test"), ("test_epoch_end", "fit"), ("training_epoch_end", "test"), ("validation_epoch_end", "predict")]


@pytest.mark.parametrize(("hook", "stage"), CASES)
def test_lightning_1_epoch_end_hooks_are_refused_where_lightning_refuses_them(hook: str, stage: str) -> None:
    theirs = attempt(lightning.pytorch, hook, stage)
    ours = attempt(L, hook, stage)
    assert (ours is None) == (theirs is None)
    if ours is not None:
        replacement = "on_train_epoch_end" if hook == "training_epoch_end" else f"on_{hook}"
        assert f"`{hook}(self, outputs)`" in str(ours) and f"`{replacement}(self)`" in str(ours)
