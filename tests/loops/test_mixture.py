"""`Mixture`: several training sources drawn by weight from a seeded generator. Its weights are
a hand-written loop's that draws the same sources from the same generator; each source's
samples are logged; a run stopped anywhere in an epoch (before or after a source started
again, or at an epoch's end) resumes to the same (source, samples) sequence and weights."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from tests.helpers.lightning_projects import assert_same_weights
from trainer import Callback, Module, Trainer
from trainer.utilities import Mixture

QUIET = {"logger": False, "enable_checkpointing": False, "enable_progress_bar": False}
WEIGHTS = {"web": 0.6, "books": 0.3, "code": 0.1}


def _source(n: int, seed: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 3, generator=g)
    return TensorDataset(x, x.sum(-1, keepdim=True), torch.arange(n))


def _sources() -> dict[str, DataLoader]:
    return {"web": DataLoader(_source(24, 1), batch_size=4, shuffle=True),
            "books": DataLoader(_source(8, 2), batch_size=4, shuffle=True),
            "code": DataLoader(_source(6, 3), batch_size=3)}


class Net(Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(3, 1)
        self.seen: list[tuple[str, list[int]]] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        source, (x, y, index) = batch
        self.seen.append((source, index.tolist()))
        return F.mse_loss(self.layer(x), y)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def _fit(root: Path, *, callbacks: list[Any] = (), ckpt_path: str | None = None) -> tuple[Net, Trainer]:  # type: ignore[assignment]
    torch.manual_seed(0)
    model = Net()
    trainer = Trainer(max_epochs=2, root_dir=str(root), callbacks=list(callbacks), **QUIET)
    trainer.fit(model, Mixture(_sources(), WEIGHTS, seed=7, length=12), ckpt_path=ckpt_path)
    return model, trainer


def test_the_weights_are_a_hand_written_loops_drawing_the_same_sources(tmp_path: Path) -> None:
    model, trainer = _fit(tmp_path)
    torch.manual_seed(0)
    reference = Net()
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.05)
    mixing = torch.Generator().manual_seed(7)
    names, weights = list(WEIGHTS), torch.tensor(list(WEIGHTS.values()), dtype=torch.float64)
    sources, iterators = _sources(), {}
    for _ in range(2):
        iterators = {}  # each epoch starts every source afresh
        for _ in range(12):
            name = names[int(torch.multinomial(weights, 1, generator=mixing))]
            if name not in iterators:
                iterators[name] = iter(sources[name])
            try:
                batch = next(iterators[name])
            except StopIteration:
                iterators[name] = iter(sources[name])
                batch = next(iterators[name])
            loss = reference.training_step((name, batch), 0)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    assert_same_weights(model, reference)
    assert model.seen == reference.seen
    assert {name for name, _ in model.seen} == set(WEIGHTS)  # every source was drawn
    counted = {name: sum(len(index) for source, index in model.seen if source == name) for name in WEIGHTS}
    assert {name: trainer.callback_metrics[f"train/mixture/{name}_samples"] for name in WEIGHTS} == counted


def _save_at(step: int, path: Path) -> Callback:
    class Save(Callback):
        def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            if trainer.global_step == step:
                trainer.save_checkpoint(path)

    return Save()


@pytest.mark.parametrize("step", [3, 9, 12, 17])
def test_a_stopped_run_resumes_the_same_sequence(step: int, tmp_path: Path) -> None:
    """Step 9 comes after the books source (2 batches) started again; 12 ends the first epoch."""
    saved = tmp_path / "mid.ckpt"
    whole, whole_trainer = _fit(tmp_path / "whole", callbacks=[_save_at(step, saved)])
    resumed, resumed_trainer = _fit(tmp_path / "resumed", ckpt_path=str(saved))
    assert resumed.seen == whole.seen[step:]
    assert_same_weights(resumed, whole)
    names = [f"train/mixture/{name}_samples" for name in WEIGHTS]
    assert [resumed_trainer.callback_metrics[n] for n in names] == [whole_trainer.callback_metrics[n] for n in names]


def test_weights_are_checked_before_any_work() -> None:
    with pytest.raises(ValueError, match="one non-negative weight per source"):
        Mixture(_sources(), {"web": 1.0, "books": -1.0, "code": 0.5})
    with pytest.raises(ValueError, match="one non-negative weight per source"):
        Mixture(_sources(), [0.5, 0.5])
    with pytest.raises(ValueError, match=r"length=\.\.\.\) expected a positive int"):
        Mixture(_sources(), [1, 1, 1], length=0)
    with pytest.raises(ValueError, match="Mixture expected length="):
        Mixture({"stream": iter([1, 2]), "web": _sources()["web"]}, [1, 1])
