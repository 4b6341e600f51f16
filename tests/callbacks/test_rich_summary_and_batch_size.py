"""RichModelSummary (a rich table, or an ImportError naming the way out) and BatchSizeFinder (refused)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from callbacks import BatchSizeFinder, ModelSummary
from trainer import Module, Trainer


class Net(Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU())
        self.head = torch.nn.Linear(8, 1)
        self.head.requires_grad_(False)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.head(self.body(x)), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_rich_model_summary_without_rich(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "rich", None)
    from callbacks import RichModelSummary

    with pytest.raises(ImportError, match="pip install rich.*ModelSummary"):
        RichModelSummary()


def test_rich_model_summary_prints_the_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rich = pytest.importorskip("rich")
    from rich.console import Console

    from callbacks import RichModelSummary

    console = Console(record=True, width=120)
    monkeypatch.setattr(rich, "get_console", lambda: console)
    summary = RichModelSummary(max_depth=2, header_style="bold")
    assert isinstance(summary, ModelSummary)  # the Trainer's own table is replaced
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 4), torch.randn(8, 1)), batch_size=4)
    trainer = Trainer(max_epochs=1, callbacks=[summary], logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, root_dir=tmp_path)
    trainer.fit(Net(), data)
    text = console.export_text()
    for expected in ("Name", "body.0", "Linear", "head", "Trainable params: 40", "Non-trainable params: 9",
                     "Total params: 49", "Modules in train mode: 5"):
        assert expected in text, expected
    assert summary.summary is not None and "body.1" in summary.summary
    with pytest.raises(ValueError, match="header_style"):
        RichModelSummary(theme="dark")


def test_batch_size_finder_is_refused_with_advice() -> None:
    with pytest.raises(ValueError, match="not offered.*accumulate_grad_batches"):
        BatchSizeFinder(mode="power", init_val=2)
