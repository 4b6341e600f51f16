"""The learning-rate finder: a suggestion in the known good range on a synthetic problem, and
nothing changed afterwards (weights, optimizer, random streams, the run that follows)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from tests.helpers.reference import assert_same_weights, loader, make_data, make_model
from trainer import Module, Trainer
from trainer._utils import rng_state
from trainer.tuner import LRFinderResult, Tuner, lr_find

QUIET = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False, device="cpu", num_sanity_val_steps=0)


class Regression(Module):
    """y = x @ w + noise, plain SGD: the loss is a quadratic whose Hessian is about 2 * I, so SGD
    diverges above lr = 2 / 2 = 1, and below 1e-3 a hundred steps barely move it."""

    def __init__(self, lr: float = 0.5) -> None:
        super().__init__()
        self.lr = lr
        self.layer = torch.nn.Linear(10, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=self.lr)


def regression_data() -> DataLoader:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4096, 10, generator=g)
    y = x @ torch.randn(10, 1, generator=g) + 0.1 * torch.randn(4096, 1, generator=g)
    return DataLoader(TensorDataset(x, y), batch_size=256, shuffle=True, generator=torch.Generator().manual_seed(1))


def test_suggestion_falls_in_the_good_range():
    torch.manual_seed(0)
    result = lr_find(Trainer(**QUIET), Regression(), regression_data(), min_lr=1e-5, max_lr=10)
    lrs, losses = result.results["lr"], result.results["loss"]
    assert lrs[0] == pytest.approx(1e-5) and all(b > a for a, b in zip(lrs, lrs[1:]))
    assert len(lrs) < 100  # the loss diverged past lr = 1 and the sweep stopped early
    suggestion = result.suggestion()
    assert suggestion is not None and 1e-2 <= suggestion <= 1.0, suggestion
    linear = lr_find(Trainer(**QUIET), Regression(), regression_data(), min_lr=1e-3, max_lr=3, mode="linear")
    assert linear.mode == "linear" and 1e-2 <= (linear.suggestion() or 0) <= 1.0


def test_nothing_changes_and_the_next_fit_is_as_without_it():
    def fit_twice(find: bool) -> tuple[Module, Trainer, dict[str, Any]]:
        model = make_model(lr=0.01)
        torch.manual_seed(1)
        data = loader(make_data())
        trainer = Trainer(max_epochs=2, **QUIET)
        trainer.fit(model, data)  # a first run: an optimizer with momentum exists
        seen: dict[str, Any] = {}
        if find:
            before = {k: v.clone() for k, v in model.state_dict().items()}
            optimizer = trainer.optimizer.state_dict()  # type: ignore[union-attr]
            momentum = [s["momentum_buffer"].clone() for s in optimizer["state"].values()]
            streams = rng_state()
            numpy = np.random.get_state()[1].copy()
            result = lr_find(trainer, model, data, num_training=20)
            seen["result"] = result
            after = model.state_dict()
            assert all(torch.equal(before[k], after[k]) for k in before)
            now = trainer.optimizer.state_dict()  # type: ignore[union-attr]
            assert all(torch.equal(a, s["momentum_buffer"]) for a, s in zip(momentum, now["state"].values()))
            assert now["param_groups"][0]["lr"] == optimizer["param_groups"][0]["lr"]
            restored = rng_state()
            assert torch.equal(restored["torch"], streams["torch"])
            assert torch.equal(restored["python"]["state"], streams["python"]["state"])
            assert np.array_equal(np.random.get_state()[1], numpy)
            assert model.training and model.trainer is trainer  # modes and the Trainer link as they were
            assert all(p.grad is None for p in model.parameters())
        continued = Trainer(max_epochs=2, **QUIET)  # a new run on the same model
        continued.fit(model, data)
        return model, trainer, seen

    plain, _, _ = fit_twice(False)
    found, _, seen = fit_twice(True)
    assert_same_weights(plain, found)
    assert len(seen["result"].results["lr"]) == 20


def test_a_loader_with_its_own_generator_is_left_where_it_was():
    data = regression_data()
    state = data.generator.get_state()  # type: ignore[union-attr]
    lr_find(Trainer(**QUIET), Regression(), data, num_training=10)
    assert torch.equal(data.generator.get_state(), state)  # type: ignore[union-attr]


def test_tuner_sets_the_learning_rate_as_lightning():
    model = Regression(lr=123.0)
    trainer = Trainer(**QUIET)
    result = Tuner(trainer).lr_find(model, train_dataloaders=regression_data(), min_lr=1e-5, max_lr=10)
    assert model.lr == result.suggestion() and 1e-2 <= model.lr <= 1.0
    assert lr_find(Trainer(**QUIET), Regression(lr=123.0), regression_data(), num_training=10) is not None  # ours: off
    with pytest.raises(AttributeError, match="learning rate attribute"):
        Tuner(trainer).lr_find(Nameless(), regression_data())
    with pytest.raises(ValueError, match="min_lr < max_lr"):
        lr_find(trainer, Regression(), regression_data(), min_lr=1.0, max_lr=0.1)


class Nameless(Module):
    """No `lr` attribute: update_attr has nothing to set."""


def test_suggestion_rules():
    result = LRFinderResult([1e-4, 1e-3, 1e-2, 1e-1, 1.0], [2.0, 1.9, 1.2, 1.0, 5.0])
    # slopes per decade (central differences): -0.1, -0.4, -0.45, -0.2: the steepest at 1e-2
    assert result.suggestion(skip_begin=0, skip_end=1) == 1e-2
    assert result.suggestion(skip_begin=4) is None  # too few points left


def test_plot_and_saving_it(tmp_path):
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    trainer = Trainer(root_dir=tmp_path, logger=False, enable_progress_bar=False, device="cpu")
    result = lr_find(trainer, Regression(), regression_data(), min_lr=1e-5, max_lr=10)
    figure = result.plot()
    assert figure.axes[0].get_xscale() == "log" and figure.axes[0].get_xlabel() == "Learning rate"
    path = result.save_plot()
    assert path == trainer.log_dir / "lr_find.png" and path.stat().st_size > 1000
    assert result.save_plot(tmp_path / "elsewhere.png").is_file()


def test_several_training_loaders_with_their_own_generators_are_left_where_they_were():
    """A dict of training loaders (combined as Lightning combines them): each loader's own generator
    is put back after the sweep, so the fit that follows reads them as it would have."""

    class TwoSources(Regression):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return sum(super(TwoSources, self).training_step(part, batch_idx) for part in batch.values())

    data = {"a": regression_data(), "b": regression_data()}
    data["b"].generator.manual_seed(2)  # type: ignore[union-attr]
    states = {name: loader.generator.get_state() for name, loader in data.items()}  # type: ignore[union-attr]
    lr_find(Trainer(**QUIET), TwoSources(), data, num_training=10)
    assert all(torch.equal(data[name].generator.get_state(), state) for name, state in states.items())  # type: ignore[union-attr]
