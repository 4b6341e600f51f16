"""`trainer.fit_loop`: what Lightning projects read and set on it (`max_epochs` raised before a
further fit, the epoch counters, the step counters) gives Lightning's values and trains to
Lightning's weights; the rest of Lightning's loop internals raises naming what to read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from tests.helpers.lightning_projects import assert_same_weights

pytest.importorskip("lightning")


def run(pkg: Any, root: Path) -> tuple[Any, list[tuple[Any, ...]], Any]:
    seen: list[tuple[Any, ...]] = []

    class Net(pkg.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(3, 1)

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            loop = self.trainer.fit_loop
            seen.append(("step", loop.max_epochs, loop.max_steps, loop.epoch_progress.current.completed,
                         loop.epoch_progress.current.started, loop.epoch_loop.global_step,
                         loop.epoch_loop._batches_that_stepped))
            x, y = batch
            return torch.nn.functional.mse_loss(self.layer(x), y)

        def on_train_epoch_end(self) -> None:
            loop = self.trainer.fit_loop
            seen.append(("epoch end", loop.epoch_progress.current.completed, loop.epoch_progress.current.started))

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    g = torch.Generator().manual_seed(0)
    loader = DataLoader(TensorDataset(torch.randn(8, 3, generator=g), torch.randn(8, 1, generator=g)), batch_size=4)
    torch.manual_seed(0)
    model = Net()
    first = pkg.Trainer(max_epochs=1, logger=False, enable_progress_bar=False, enable_model_summary=False,
                        default_root_dir=str(root))
    first.fit(model, loader)
    seen.append(("after", first.fit_loop.max_epochs, first.fit_loop.epoch_progress.current.completed, first.fit_loop.done))
    first.fit_loop.max_epochs = 3  # the idiom that extends a finished run
    first.fit_loop.epoch_loop.max_steps = 100  # (a stop inside an epoch counts differently: docs/lightning.md)
    seen.append(("set", first.max_epochs, first.max_steps))
    first.fit(model, loader)  # the same Trainer continues to the new limits
    seen.append(("continued", first.current_epoch, first.global_step, first.fit_loop.done))
    return model, seen, first


def test_fit_loop_reads_and_sets_as_in_lightning(tmp_path: Path) -> None:
    import lightning.pytorch as lightning

    import trainer

    ours, our_seen, _ = run(trainer, tmp_path / "ours")
    theirs, their_seen, _ = run(lightning, tmp_path / "lightning")
    assert our_seen == their_seen
    assert ("continued", 3, 6, True) in our_seen  # two more epochs of two steps
    assert_same_weights(ours, theirs)


def test_fit_loop_internals_name_what_to_read(tmp_path: Path) -> None:
    import trainer

    run_trainer = trainer.Trainer(max_epochs=1, logger=False)
    with pytest.raises(AttributeError, match=r"fit_loop\.epoch_loop\.val_loop .*trainer\.global_step"):
        run_trainer.fit_loop.epoch_loop.val_loop
    with pytest.raises(ValueError, match="max_epochs"):
        run_trainer.fit_loop.max_epochs = -2
    run_trainer.fit_loop.max_epochs = -1  # Lightning's "no limit"
    assert run_trainer.max_epochs is None and run_trainer.fit_loop.max_epochs == -1
