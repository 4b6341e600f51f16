"""The metric values the Trainer reports are floats that also answer what code written for
Lightning's scalar tensors calls on them: `trainer.callback_metrics["val_loss"].item()` (Optuna's
and Ray Tune's Lightning callbacks), `checkpoint_callback.best_model_score.item()`, after a
resume too; checkpoints still hold plain floats (they load with `weights_only=True`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import trainer as L


def make_net(base: type) -> Any:
    class Net(base):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(3, 1)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            loss = torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1])
            self.log("train_loss", loss)
            return loss

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            self.log("val_loss", torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1]))

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    return Net()


class Reporter:
    """What an Optuna pruning callback or a Ray Tune report callback does at each validation's end."""

    reported: list[float]

    def on_validation_end(self, trainer: Any, module: Any) -> None:
        if not trainer.sanity_checking:
            self.reported.append(trainer.callback_metrics["val_loss"].item())


def fit(framework: Any, root: Path, epochs: int = 2, ckpt_path: str | None = None) -> tuple[Any, Any, Any]:
    """`framework`: this package (`trainer`) or `lightning.pytorch`."""
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(16, 3), torch.randn(16, 1))
    model = make_net(framework.LightningModule)
    reporter = type("Reporter", (Reporter, framework.Callback), {})()
    reporter.reported = []
    checkpoint = framework.callbacks.ModelCheckpoint(monitor="val_loss")
    trainer = framework.Trainer(default_root_dir=root, max_epochs=epochs, callbacks=[checkpoint, reporter], logger=False,
                                enable_progress_bar=False, enable_model_summary=False, accelerator="cpu")
    trainer.fit(model, DataLoader(data, batch_size=4), DataLoader(data, batch_size=8), ckpt_path=ckpt_path)
    return trainer, reporter, checkpoint


def test_callback_metrics_answer_item_with_lightnings_values(tmp_path: Path) -> None:
    lightning = pytest.importorskip("lightning")
    ours, our_reporter, our_checkpoint = fit(L, tmp_path / "ours")
    theirs, their_reporter, their_checkpoint = fit(lightning.pytorch, tmp_path / "theirs")
    our_reports, their_reports = our_reporter.reported, their_reporter.reported
    assert our_reports == their_reports and len(our_reports) == 2
    assert our_checkpoint.best_model_score.item() == their_checkpoint.best_model_score.item()
    value = ours.callback_metrics["val_loss"]
    assert isinstance(value, float) and value.item() == float(value) == their_reports[-1]
    assert value.cpu().detach().item() == float(value) and value.numpy() == float(value) and value.tolist() == float(value)
    assert ours.logged_metrics["val_loss"].item() == theirs.logged_metrics["val_loss"].item() == their_reports[-1]
    assert all(v.item() == float(v) for v in ours.logged_metrics.values())


def test_checkpoints_hold_plain_floats_and_a_resume_answers_item_again(tmp_path: Path) -> None:
    trainer, _, checkpoint = fit(L, tmp_path, epochs=1)
    assert type(checkpoint.best_model_score) is not float  # what a user reads answers .item()
    state = torch.load(checkpoint.best_model_path, weights_only=True)  # no class of ours in the file
    kept = [v for v in state["callbacks"].values() if isinstance(v, dict) and "best_model_score" in v]
    assert kept and type(kept[0]["best_model_score"]) is float
    assert all(type(v) is float for v in kept[0]["best_k_models"].values())
    resumed, reporter, again = fit(L, tmp_path, epochs=2, ckpt_path=checkpoint.best_model_path)
    assert again.best_model_score.item() == min(again.best_k_models.values())
    assert len(reporter.reported) == 1
