"""What configure_optimizers may return and how schedulers step (Lightning's forms and rules),
clipping in the module's parameter order, and gradient norms that never break training."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from tests.helpers.reference import TinyNet, assert_same_weights, loader, make_data, make_model
from trainer import Module, Trainer
from trainer.loops.optimizers import parse_optimizers

QUIET = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False, device="cpu")


def sgd_pair() -> tuple[torch.optim.Optimizer, torch.optim.Optimizer, Any, Any]:
    a, b = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    opt_a, opt_b = torch.optim.SGD(a.parameters(), lr=0.1), torch.optim.SGD(b.parameters(), lr=0.1)
    return opt_a, opt_b, torch.optim.lr_scheduler.StepLR(opt_a, 1), torch.optim.lr_scheduler.StepLR(opt_b, 1)


def test_every_lightning_form_is_understood():
    opt_a, opt_b, sched_a, sched_b = sgd_pair()
    assert parse_optimizers(opt_a).optimizers == [opt_a]
    setup = parse_optimizers((opt_a, opt_b))  # two optimizers, never (optimizer, scheduler)
    assert setup.optimizers == [opt_a, opt_b] and setup.schedulers == []
    setup = parse_optimizers(([opt_a, opt_b], [sched_a, {"scheduler": sched_b, "interval": "step", "frequency": 2}]))
    assert [c.scheduler for c in setup.schedulers] == [sched_a, sched_b]
    assert [(c.interval, c.frequency) for c in setup.schedulers] == [("epoch", 1), ("step", 2)]
    setup = parse_optimizers([{"optimizer": opt_a, "lr_scheduler": sched_a}, {"optimizer": opt_b}])
    assert setup.optimizers == [opt_a, opt_b] and len(setup.schedulers) == 1
    setup = parse_optimizers((opt_a, sched_a))  # ours: (optimizer, scheduler)
    assert setup.optimizers == [opt_a] and setup.schedulers[0].interval == "epoch"  # PyTorch's and Lightning's default


def test_plateau_takes_the_top_level_monitor():
    opt_a, *_ = sgd_pair()
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(opt_a)
    setup = parse_optimizers({"optimizer": opt_a, "lr_scheduler": plateau, "monitor": "val/loss"})
    assert setup.schedulers[0].monitor == "val/loss" and setup.schedulers[0].interval == "epoch"
    with pytest.raises(ValueError, match="ReduceLROnPlateau without a 'monitor'"):
        parse_optimizers({"optimizer": opt_a, "lr_scheduler": plateau})


@pytest.mark.parametrize(
    ("returned", "text"),
    [
        ({"optimizer": "sgd"}, "a dict with keys ['optimizer']"),
        ({"optimizer": None, "scheduler": 1}, "expected 'optimizer'"),
        ("lbfgs", "'lbfgs' of type str"),
        ([], "a list of ()"),
    ],
)
def test_bad_forms_name_what_was_received(returned, text):
    with pytest.raises(ValueError, match="configure_optimizers") as caught:
        parse_optimizers(returned)
    assert text in str(caught.value)


def test_bad_scheduler_settings():
    opt_a, _, sched_a, _ = sgd_pair()
    for spec, text in (
        ({"scheduler": sched_a, "interval": "batch"}, "'batch'"),
        ({"scheduler": sched_a, "frequency": 0}, "frequency 0"),
        ({"scheduler": sched_a, "every": 2}, "keys ['every', 'scheduler']"),
    ):
        with pytest.raises(ValueError, match="configure_optimizers") as caught:
            parse_optimizers({"optimizer": opt_a, "lr_scheduler": spec})
        assert text in str(caught.value)


class Scheduled(TinyNet):
    def __init__(self, spec: dict[str, Any]) -> None:
        super().__init__(dropout=0.0)
        self.spec = spec

    def configure_optimizers(self) -> Any:
        opt = torch.optim.SGD(self.parameters(), lr=0.01)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": torch.optim.lr_scheduler.StepLR(opt, 1, 0.5), **self.spec}}


@pytest.mark.parametrize(
    ("spec", "epochs", "halvings"),
    [
        ({}, 3, 3),  # once per epoch
        ({"frequency": 2}, 3, 1),  # after epochs 2 (not 1, 3)
        ({"interval": "step"}, 1, 10),  # 10 optimizer steps per epoch
        ({"interval": "step", "frequency": 3}, 2, 6),  # steps 3, 6, ..., 18 (counted over the run)
    ],
)
def test_interval_and_frequency(spec, epochs, halvings):
    trainer = Trainer(max_epochs=epochs, **QUIET)
    trainer.fit(Scheduled(spec), loader(make_data()))  # 10 batches
    assert trainer.optimizer.param_groups[0]["lr"] == pytest.approx(0.01 * 0.5**halvings, rel=1e-12)


class Plateau(TinyNet):
    def __init__(self, interval: str, monitor: str, strict: bool = True) -> None:
        super().__init__(dropout=0.0)
        self.interval, self.monitor, self.strict = interval, monitor, strict
        self.seen: list[float] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = super().training_step(batch, batch_idx)
        self.log("train/const", torch.tensor(1.0))  # never improves: the plateau fires
        return loss

    def configure_optimizers(self) -> Any:
        opt = torch.optim.SGD(self.parameters(), lr=0.01)
        plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=0, factor=0.5)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": plateau, "interval": self.interval, "strict": self.strict}, "monitor": self.monitor}


def test_reduce_on_plateau_steps_on_a_training_step_metric():
    """A step-interval plateau monitoring what training_step logged works (Lightning)."""
    trainer = Trainer(max_steps=4, **QUIET)
    trainer.fit(Plateau("step", "train/const"), loader(make_data()))
    # The first step sets the best value; each of steps 2-4 has no improvement: 3 halvings.
    assert trainer.optimizer.param_groups[0]["lr"] == pytest.approx(0.01 * 0.5**3, rel=1e-12)


def test_reduce_on_plateau_with_a_missing_monitor():
    with pytest.raises(KeyError, match=r"ReduceLROnPlateau \('monitor': 'val/nope'\): 'val/nope' was never logged"):
        Trainer(max_epochs=1, **QUIET).fit(Plateau("epoch", "val/nope"), loader(make_data()))  # found after one batch
    trainer = Trainer(max_epochs=1, **QUIET)
    with pytest.warns(RuntimeWarning, match="'val/nope', which was not logged"):
        trainer.fit(Plateau("epoch", "val/nope", strict=False), loader(make_data()))
    assert trainer.optimizer.param_groups[0]["lr"] == 0.01


# ------------------------------------------------------------------------ clipping order
class Grouped(TinyNet):
    """minGPT/nanoGPT style: no-decay parameters (biases) first, then decayed weights."""

    def configure_optimizers(self) -> Any:
        biases = [p for n, p in self.named_parameters() if n.endswith("bias")]
        weights = [p for n, p in self.named_parameters() if n.endswith("weight")]
        return torch.optim.AdamW([{"params": biases, "weight_decay": 0.0}, {"params": weights, "weight_decay": 0.1}], lr=0.01)


def test_clipping_sums_the_norm_in_module_parameter_order():
    torch.manual_seed(0)
    model = Grouped(dropout=0.0)
    expected = copy.deepcopy(model)
    data = make_data()
    Trainer(max_epochs=2, gradient_clip_val=0.05, **QUIET).fit(model, DataLoader(data, batch_size=4))
    opt = expected.configure_optimizers()
    for _ in range(2):
        for batch in DataLoader(data, batch_size=4):
            expected.training_step(batch, 0).backward()
            torch.nn.utils.clip_grad_norm_(expected.parameters(), 0.05)  # what a hand-written loop does
            opt.step()
            opt.zero_grad(set_to_none=True)
    assert_same_weights(model, expected)


def test_sparse_gradients_train_with_the_default_logging(tmp_path: Path):
    """The logged gradient norm must not break nn.Embedding(sparse=True)."""

    class Sparse(Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = torch.nn.Embedding(10, 3, sparse=True)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            (tokens,) = batch
            return self.embed(tokens).pow(2).mean()

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    tokens = torch.utils.data.TensorDataset(torch.randint(0, 10, (16, 4)))
    trainer = Trainer(max_epochs=1, log_every_n_steps=2, root_dir=tmp_path, enable_progress_bar=False)
    model = Sparse()
    trainer.fit(model, DataLoader(tokens, batch_size=4))
    assert trainer.global_step == 4 and trainer.callback_metrics["train/grad_norm"] > 0


def test_make_model_is_deterministic():
    assert_same_weights(make_model(), make_model())
