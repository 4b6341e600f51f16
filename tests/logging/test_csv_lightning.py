"""`metrics.csv` as Lightning's CSVLogger writes it, for the same small project trained under
both in this process: one row per write (a logging step's training values, the validation's
results, the epoch's training means after them, a test's), sorted columns with `epoch` and
`step`, the same values. Two documented differences (docs/lightning.md) are mapped: the
`step` of rows written during `fit` is `global_step` here, the step's 0-based index (one
less) in Lightning; and the Trainer's own `train/...` columns are extra here
(tests/helpers/csv_compare.py)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from tests.helpers.csv_compare import as_lightning_writes

pytest.importorskip("lightning")
pd = pytest.importorskip("pandas")


def _module_class(base: type) -> type:
    class Regressor(base):  # type: ignore[misc,valid-type]
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.layer(x), y)
            self.log("train_loss", loss, on_step=True, on_epoch=True, prog_bar=True)
            self.log("train_mae", (self.layer(x) - y).abs().mean(), on_step=False, on_epoch=True)
            self.log("lr_seen", torch.tensor(0.1))  # per step only
            return loss

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            x, y = batch
            self.log("val_loss", torch.nn.functional.mse_loss(self.layer(x), y), prog_bar=True)
            self.log("val_mae", (self.layer(x) - y).abs().mean())

        def test_step(self, batch: Any, batch_idx: int) -> None:
            x, y = batch
            self.log("test_loss", torch.nn.functional.mse_loss(self.layer(x), y))

        def on_train_epoch_end(self) -> None:
            self.log("epoch_hook_value", float(self.current_epoch))

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    return Regressor


def _run(framework: str, root: Path, log_every_n_steps: int) -> str:
    if framework == "ours":
        import trainer as L
        from trainer.loggers import CSVLogger
    else:
        import lightning as L  # type: ignore[no-redef]
        from lightning.pytorch.loggers import CSVLogger  # type: ignore[no-redef]
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(40, 4), torch.randn(40, 1))
    model = _module_class(L.LightningModule)()
    trainer = L.Trainer(max_epochs=3, logger=CSVLogger(save_dir=root, name="csv/"), log_every_n_steps=log_every_n_steps,
                        enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False)
    trainer.fit(model, DataLoader(data, batch_size=8), DataLoader(data, batch_size=10))
    trainer.validate(model, DataLoader(data, batch_size=10), verbose=False)
    trainer.test(model, DataLoader(data, batch_size=10), verbose=False)
    return (Path(trainer.logger.log_dir) / "metrics.csv").read_text()


def test_metrics_csv_rows_and_columns_are_lightnings(tmp_path: Path) -> None:
    ours = _run("ours", tmp_path / "ours", log_every_n_steps=5)  # 5 batches an epoch: every epoch's last step logs
    theirs = _run("lightning", tmp_path / "theirs", log_every_n_steps=5)
    header = ours.splitlines()[0].split(",")
    assert header == sorted(header) and {"epoch", "step"} <= set(header)
    mine, other = as_lightning_writes(ours, theirs, epochs_fitted=3)
    assert mine == other
    assert other.count("\n") > 10  # step rows, validation rows, epoch rows, validate() and test() rows


def _tutorial_table(text: str) -> Any:
    """Lightning's CIFAR-10 baseline tutorial reads its metrics like this."""
    metrics = pd.read_csv(io.StringIO(text))
    del metrics["step"]
    metrics.set_index("epoch", inplace=True)
    return metrics


@pytest.mark.parametrize("log_every_n_steps", [2, 50])
def test_the_tutorial_pandas_table_is_lightnings(log_every_n_steps: int, tmp_path: Path) -> None:
    """`pd.read_csv(...); del metrics["step"]; metrics.set_index("epoch")`: every epoch's
    validation and training means are there, in Lightning's rows."""
    ours = _tutorial_table(_run("ours", tmp_path / "ours", log_every_n_steps))
    theirs = _tutorial_table(_run("lightning", tmp_path / "theirs", log_every_n_steps))
    for column in ("val_loss", "val_mae", "train_loss_epoch", "train_mae", "epoch_hook_value", "test_loss"):
        mine, other = ours[column].dropna(), theirs[column].dropna()
        assert list(mine.index) == list(other.index) and list(mine) == list(other), column
    assert list(theirs["val_loss"].dropna().index) == [0, 1, 2, 3]  # the fit's three, then validate()'s
