"""The default tqdm progress bar, read from the captured terminal output."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset
from tqdm import tqdm

from trainer import Callback, Module, Trainer


class Net(Module):
    def __init__(self, fail_at: int | None = None) -> None:
        super().__init__()
        self.fail_at = fail_at
        self.layer = torch.nn.Linear(3, 1)

    def training_step(self, batch, batch_idx):
        if batch_idx == self.fail_at:
            raise RuntimeError("boom")
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.log("train/mse", loss, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val/loss", torch.nn.functional.mse_loss(self.layer(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def data(n: int = 40) -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(n, 3, generator=g), torch.randn(n, 1, generator=g))


class Unsized:
    """An iterable of batches without __len__."""

    def __init__(self, loader: DataLoader) -> None:
        self.loader = loader

    def __iter__(self):
        return iter(self.loader)


def make_trainer(tmp_path: Path, **kwargs) -> Trainer:
    # the bar itself (pytest's captured stderr is not a terminal, which would pick lines)
    base = dict(root_dir=tmp_path, logger=False, enable_checkpointing=False, log_every_n_steps=5, progress_lines=False)
    base.update(kwargs)
    return Trainer(**base)


def final_states(err: str, prefix: str) -> list[str]:
    """The last drawn state of each bar whose description starts with `prefix`."""
    frames = [f.strip() for f in re.split(r"[\r\n]", err) if f.strip()]
    return [f for f in frames if f.startswith(prefix)]


def test_train_and_validation_bars(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trainer = make_trainer(tmp_path, max_epochs=2)
    trainer.fit(Net(), DataLoader(data(), batch_size=4), DataLoader(data(), batch_size=8))
    captured = capsys.readouterr()
    assert captured.out == ""
    for epoch in (0, 1):
        frames = final_states(captured.err, f"Epoch {epoch}:")
        last = frames[-1]
        assert "10/10" in last and "100%" in last
        shown = dict(re.findall(r"([\w/]+)=([-\d.e]+)", last))
        assert set(shown) == {"loss", "train/mse"}
        assert float(shown["loss"]) == pytest.approx(float(shown["train/mse"]), rel=1e-3)
    assert final_states(captured.err, "Validation:")  # drawn, then cleared (leave=False)
    assert "\x1b[A" in captured.err  # drawn on the line below the training bar (position=1)
    assert len(tqdm._instances) == 0


def test_loader_without_len_shows_a_count(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trainer = make_trainer(tmp_path, max_epochs=1)
    trainer.fit(Net(), Unsized(DataLoader(data(), batch_size=4)))
    last = final_states(capsys.readouterr().err, "Epoch 0:")[-1]
    assert re.match(r"Epoch 0: 10batch \[", last), last  # no total, no percentage
    assert "%" not in last


def test_bar_numbers_refresh_every_half_second_and_at_logging_steps(tmp_path: Path) -> None:
    seen: list[dict[str, str] | None] = []
    now = [0.0]

    class Watch(Callback):
        def read(self) -> None:
            bars = [bar for bar in tqdm._instances if str(bar.desc).startswith("Epoch")]
            postfix = bars[0].postfix
            seen.append(dict(re.findall(r"([\w/]+)=([-\d.e]+)", postfix)) if postfix else None)

        def on_train_batch_start(self, trainer, module, batch, batch_idx) -> None:
            self.read()  # the bar as left by steps 1..batch_idx
            now[0] += 0.2  # each step takes 0.2 s

        def on_train_epoch_end(self, trainer, module) -> None:
            self.read()

    trainer = make_trainer(tmp_path, max_epochs=1, callbacks=[Watch()])
    trainer._run.output._live.clock = lambda: now[0]
    trainer.fit(Net(), DataLoader(data(), batch_size=4))
    # The loss and the prog_bar metrics show after the first step (0.2 s), then at most every
    # 0.5 s: steps 4 (0.8 s) and 7 (1.4 s); and at logging steps 5 and 10. Each time both are
    # the same step's (Net logs its loss as train/mse).
    assert seen[0] is None
    assert seen[1] == seen[2] == seen[3] and set(seen[1] or {}) == {"loss", "train/mse"}
    assert seen[4] is not None and seen[4] != seen[3]
    assert seen[5] == seen[6] and seen[5] != seen[4]
    assert seen[7] == seen[8] == seen[9] and seen[7] != seen[6]
    assert seen[10] is not None and seen[10] != seen[9]
    for shown in (seen[1], seen[4], seen[5], seen[7], seen[10]):
        assert shown is not None and set(shown) == {"loss", "train/mse"} and shown["loss"] == shown["train/mse"]


def test_nothing_printed_when_disabled(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trainer = make_trainer(tmp_path, max_epochs=2, enable_progress_bar=False)
    trainer.fit(Net(), DataLoader(data(), batch_size=4), DataLoader(data(), batch_size=8))
    trainer.validate(Net(), DataLoader(data(), batch_size=8), verbose=False)  # verbose=True prints the results table (Lightning's)
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", "")


def test_bars_are_closed_when_fit_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trainer = make_trainer(tmp_path, max_epochs=1)
    with pytest.raises(RuntimeError, match="boom"):
        trainer.fit(Net(fail_at=3), DataLoader(data(), batch_size=4))
    assert len(tqdm._instances) == 0
    last = final_states(capsys.readouterr().err, "Epoch 0:")[-1]
    assert "3/10" in last


def test_standalone_test_bar_has_its_total(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    class Tested(Net):
        def test_step(self, batch, batch_idx):
            self.validation_step(batch, batch_idx)

    make_trainer(tmp_path).test(Tested(), DataLoader(data(), batch_size=8))
    last = final_states(capsys.readouterr().err, "Test:")[-1]
    assert "5/5" in last
    assert len(tqdm._instances) == 0
