"""One rule for "does the module have its own hook": a method of its class or one set on the
instance (Lightning's `is_overridden`), for every hook the loops look up, the optimizer ones
included; `None` switches a step off."""

from __future__ import annotations

from typing import Any

import torch

from tests.helpers.reference import TinyNet, loader, make_data
from trainer import Trainer
from trainer.module import Module, own_hook

QUIET = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False, device="cpu")


def test_an_instance_hook_counts_and_none_switches_off() -> None:
    model = TinyNet()
    assert own_hook(model, "training_step") is not None and own_hook(model, "backward") is None
    model.validation_step = None  # type: ignore[assignment,method-assign]
    assert own_hook(model, "validation_step") is None
    model.backward = lambda loss, *args, **kwargs: loss.backward()  # type: ignore[method-assign]
    assert own_hook(model, "backward") is not None
    assert own_hook(Module(), "training_step") is None


def test_optimizer_hooks_set_on_the_instance_run() -> None:
    calls: list[str] = []
    model = TinyNet()

    def clip(optimizer: Any, gradient_clip_val: Any = None, gradient_clip_algorithm: Any = None) -> None:
        calls.append("clip")

    def backward(loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        calls.append("backward")
        loss.backward()

    model.configure_gradient_clipping = clip  # type: ignore[method-assign]
    model.backward = backward  # type: ignore[method-assign]
    Trainer(max_epochs=1, limit_train_batches=3, **QUIET).fit(model, loader(make_data(12), shuffle=False))
    assert calls == ["backward", "clip"] * 3
