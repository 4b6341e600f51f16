"""`trainer.validate()`/`test()` on a module without `validation_step`/`test_step` is refused
before any batch is read, as Lightning refuses it, rather than returning nothing."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

pytest.importorskip("lightning")


def module(pkg: Any) -> Any:
    class Net(pkg.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            return self.layer(batch).sum()

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    return Net()


@pytest.mark.parametrize("verb", ["validate", "test"])
def test_an_evaluation_without_its_step_is_refused_as_in_lightning(verb: str) -> None:
    import lightning.pytorch as lightning

    import trainer

    loader = DataLoader(torch.ones(4, 2), batch_size=2)
    step = "validation_step" if verb == "validate" else "test_step"
    theirs = lightning.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False)
    with pytest.raises(Exception, match=step):
        getattr(theirs, verb)(module(lightning), loader)
    ours = trainer.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False)
    with pytest.raises(ValueError, match=rf"{verb}\(\) runs {step}, and Net has none\. Expected a method `{step}"):
        getattr(ours, verb)(module(trainer), loader)
