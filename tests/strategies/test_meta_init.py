"""A model built on the meta device (`configure_model` under `torch.device("meta")`).

FSDP makes it real after sharding (tests/examples/test_distributed_examples.py trains
pytorch/examples' FSDP2 example that way on 2 processes, to the script's weights); what it
cannot initialize is an error before anything is allocated. The strategies that move the whole model to a device refuse it
before the first step, saying what to do.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from trainer import Module, Trainer
from trainer.strategies.materialize import materialize


class Scale(torch.nn.Module):
    """A parameter of its own and no reset_parameters()."""

    def __init__(self) -> None:
        super().__init__()
        self.gain = torch.nn.Parameter(torch.ones(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gain


class MetaNet(Module):
    def __init__(self) -> None:
        super().__init__()
        self.steps = 0

    def configure_model(self) -> None:
        with torch.device("meta"):
            self.net = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 1))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.steps += 1
        return self.net(batch).sum()

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_a_single_device_refuses_a_meta_model_before_the_first_step() -> None:
    model = MetaNet()
    trainer = Trainer(device="cpu", max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False)
    with pytest.raises(ValueError, match=r"meta device, in net\.0 \(Linear\), net\.1 \(Linear\)\. strategy='single' "
                                         r"moves the whole model to cpu.*strategy='fsdp'"):
        trainer.fit(model, DataLoader(torch.randn(8, 4), batch_size=2))
    assert model.steps == 0


def test_a_module_without_reset_parameters_is_named_before_anything_is_allocated() -> None:
    with torch.device("meta"):
        model = torch.nn.Sequential(torch.nn.Linear(4, 4), Scale())
    with pytest.raises(ValueError, match=r"without one: 1 \(Scale\)\. Expected a reset_parameters\(\)"):
        materialize(model, model, torch.device("cpu"))
    assert all(p.is_meta for p in model.parameters())


def test_a_model_partly_on_the_meta_device_is_refused() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 4))
    with torch.device("meta"):
        model.append(torch.nn.Linear(4, 1))
    kept = model[0].weight.detach().clone()
    with pytest.raises(ValueError, match=r"others not \(0\.weight, 0\.bias are real\)"):
        materialize(model, model, torch.device("cpu"))
    assert torch.equal(model[0].weight, kept)


def test_materialize_initializes_each_module_as_reset_parameters_does() -> None:
    torch.manual_seed(3)
    with torch.device("meta"):
        model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4), torch.nn.Linear(4, 1))
    materialize(model, model, torch.device("cpu"))
    reference = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4), torch.nn.Linear(4, 1))
    torch.manual_seed(3)
    for layer in reference:
        layer.reset_parameters()
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), reference.state_dict().values()))
    assert not any(p.is_meta for p in model.parameters())
