"""`trainer.checkpoint_callback.best_model_path` after a fit without a `ModelCheckpoint` (Lightning
adds a default one): a project that loads it, as many scripts do, loads the weights Lightning's
would, and before any fit it is an empty string, as Lightning's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from tests.helpers.lightning_projects import assert_same_weights

pytest.importorskip("lightning")


def run(pkg: Any, root: Path) -> tuple[Any, Any, str]:
    class Net(pkg.LightningModule):
        def __init__(self, hidden: int = 4) -> None:
            super().__init__()
            self.save_hyperparameters()
            self.net = torch.nn.Sequential(torch.nn.Linear(3, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, 1))

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            x, y = batch
            return torch.nn.functional.mse_loss(self.net(x), y)

        def configure_optimizers(self) -> Any:
            return torch.optim.Adam(self.parameters(), lr=0.01)

    g = torch.Generator().manual_seed(0)
    loader = DataLoader(TensorDataset(torch.randn(12, 3, generator=g), torch.randn(12, 1, generator=g)), batch_size=4)
    torch.manual_seed(0)
    trainer = pkg.Trainer(max_epochs=3, default_root_dir=str(root), enable_progress_bar=False, enable_model_summary=False)
    before = trainer.checkpoint_callback.best_model_path
    trainer.fit(Net(hidden=5), loader)
    best = Net.load_from_checkpoint(trainer.checkpoint_callback.best_model_path)  # the script's next line
    return best, trainer, before


def test_best_model_path_without_a_model_checkpoint_loads_lightnings_weights(tmp_path: Path) -> None:
    import lightning.pytorch as lightning

    import trainer

    ours, our_trainer, our_before = run(trainer, tmp_path / "ours")
    theirs, their_trainer, their_before = run(lightning, tmp_path / "lightning")
    assert our_before == their_before == ""
    assert ours.hparams == theirs.hparams == {"hidden": 5}
    assert_same_weights(ours, theirs)
    ours_cb, theirs_cb = our_trainer.checkpoint_callback, their_trainer.checkpoint_callback
    assert (ours_cb.monitor, ours_cb.best_model_score) == (theirs_cb.monitor, theirs_cb.best_model_score) == (None, None)
    assert Path(ours_cb.best_model_path).parent == Path(ours_cb.dirpath)


def test_no_view_when_checkpointing_is_off() -> None:
    import trainer

    assert trainer.Trainer(enable_checkpointing=False, logger=False).checkpoint_callback is None
