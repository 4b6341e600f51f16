"""Activation checkpointing: the chosen submodules run their forward again in backward, and
the weights equal those of a run without it (and the hand-written loop) bit for bit."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from tests.helpers.reference import assert_same_weights, loader, make_data, make_model, reference_fit
from trainer import Module, Trainer
from trainer.core.activation_checkpointing import checkpoint_activations, chosen_modules

QUIET = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False, device="cpu", num_sanity_val_steps=0)


class Block(torch.nn.Module):
    def __init__(self, width: int, dropout: float = 0.2) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(width)
        self.up, self.down = torch.nn.Linear(width, 4 * width), torch.nn.Linear(4 * width, width)
        self.dropout = torch.nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        return x + scale * self.dropout(self.down(torch.nn.functional.gelu(self.up(self.norm(x)))))


class Stack(Module):
    """A transformer-shaped stack: blocks with dropout, so the recomputation must replay the masks."""

    def __init__(self, width: int = 16, layers: int = 3) -> None:
        super().__init__()
        self.embed = torch.nn.Linear(6, width)
        self.blocks = torch.nn.ModuleList(Block(width) for _ in range(layers))
        self.head = torch.nn.Linear(width, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x)
        for block in self.blocks:
            h = block(h, scale=0.5)  # a keyword argument passes through the checkpoint
        return self.head(h)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self(x).float(), y)

    def configure_optimizers(self) -> Any:
        return torch.optim.AdamW(self.parameters(), lr=1e-2)


def train(setting: Any, precision: str, accumulate: int = 1) -> tuple[Stack, int]:
    torch.manual_seed(0)
    model = Stack()
    calls = [0]
    model.blocks[0].up.register_forward_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    torch.manual_seed(1)
    Trainer(precision=precision, max_epochs=2, accumulate_grad_batches=accumulate, activation_checkpointing=setting,
            **QUIET).fit(model, loader(make_data()))
    return model, calls[0]


@pytest.mark.parametrize("precision", ["fp32", "amp", "bf16"])
def test_weights_equal_a_run_without_it(precision):
    plain, forwards = train(False, precision, accumulate=2)
    after_plain = torch.get_rng_state()
    checkpointed, recomputed = train(["Block"], precision, accumulate=2)
    assert_same_weights(plain, checkpointed)
    assert forwards == 20 and recomputed == 40  # 10 micro-batches x 2 epochs; each block's forward runs again in backward
    assert torch.equal(torch.get_rng_state(), after_plain)  # the random streams end where they would without it


def test_equals_the_hand_written_loop_with_dropout_inside():
    reference = make_model()
    torch.manual_seed(1)
    reference_fit(reference, loader(make_data()), precision="amp", epochs=2)
    ours = make_model()
    torch.manual_seed(1)
    Trainer(precision="amp", max_epochs=2, activation_checkpointing=[torch.nn.Sequential], **QUIET).fit(ours, loader(make_data()))
    assert_same_weights(reference, ours)


def test_which_modules_are_chosen():
    model = Stack(width=16)
    assert [name for name, _ in chosen_modules(model, ["Block"])] == ["blocks.0", "blocks.1", "blocks.2"]
    assert [name for name, _ in chosen_modules(model, ["Block", "Linear"])][:2] == ["embed", "blocks.0"]  # not blocks.0.up
    # the size rule: each block holds 2 * 16 * 64 + 64 + 16 + 2 * 16 = 2,160 of the 6,609 parameters
    assert [name for name, _ in chosen_modules(model, 2000)] == ["blocks.0", "blocks.1", "blocks.2"]
    assert [name for name, _ in chosen_modules(model, 100)][:2] == ["embed", "blocks.0"]  # the trunk (blocks) is looked into
    assert chosen_modules(model, 2200) == []  # a block is too small, the trunk too big
    big = Stack(width=512, layers=1)  # its block's up and down hold over 1,000,000 parameters each
    assert [name for name, _ in chosen_modules(big, True)] == ["blocks.0.up", "blocks.0.down"]
    with pytest.raises(ValueError, match="no submodule of class Attention"):
        chosen_modules(model, ["Attention"])


def test_a_class_named_by_its_import_path_chooses_as_its_name_does():
    """A YAML file names classes by their import path: `torch.nn.Linear` is the class `Linear`."""
    model = Stack(width=16)
    by_name = [name for name, _ in chosen_modules(model, ["Linear"])]
    assert [name for name, _ in chosen_modules(model, ["torch.nn.Linear"])] == by_name
    assert [name for name, _ in chosen_modules(model, [f"{__name__}.Block"])] == ["blocks.0", "blocks.1", "blocks.2"]
    with pytest.raises(ValueError, match=r"no submodule of class torch\.nn\.Lineer\. .*Did you mean 'Linear'"):
        chosen_modules(model, ["torch.nn.Lineer"])


def test_state_dict_keys_and_evaluation_are_unchanged():
    model = Stack()
    keys = list(model.state_dict())
    assert checkpoint_activations(model, ["Block"]) == ["blocks.0", "blocks.1", "blocks.2"]
    assert checkpoint_activations(model, ["Block"]) == ["blocks.0", "blocks.1", "blocks.2"]  # once
    assert list(model.state_dict()) == keys
    model.eval()
    x = torch.randn(3, 6)
    with torch.no_grad():
        checkpointed = model(x)
    plain = Stack()
    plain.load_state_dict(model.state_dict())
    plain.eval()
    assert torch.equal(checkpointed, plain(x).detach())


def test_refused_settings():
    for bad in ([], "Block", [3]):
        with pytest.raises(ValueError, match="activation_checkpointing"):
            Trainer(activation_checkpointing=bad, logger=False)
    data = DataLoader(TensorDataset(torch.randn(4, 6), torch.randn(4, 1)), batch_size=2)
    with pytest.raises(ValueError, match="no submodule of class Attention"):
        Trainer(max_steps=1, activation_checkpointing=["Attention"], **QUIET).fit(Stack(), data)


def test_benchmark_measures_less_kept_for_backward():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "activation_checkpointing.py"
    spec = importlib.util.spec_from_file_location("bench_ac", path)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    tiny = {"vocab": 50, "width": 32, "layers": 2, "heads": 2, "context": 16, "batch": 2}
    off, blocks = (bench.child(setting, tiny, 2, torch.device("cpu")) for setting in ("off", "blocks"))
    assert 0 < blocks["saved_mib"] < off["saved_mib"] / 2


def test_the_flop_count_leaves_out_the_recomputation(tmp_path):
    """train/flops_per_sec and MFU count the model's FLOPs: the forward that checkpointing runs
    again in backward is extra work, not the model's."""

    class Quiet:
        def log_metrics(self, metrics: Any, step: int) -> None: ...
        def log_hyperparams(self, params: Any, metrics: Any = None) -> None: ...
        def flush(self) -> None: ...
        def close(self) -> None: ...

    counted = {}
    for setting in (False, ["Block"]):
        torch.manual_seed(0)
        trainer = Trainer(max_steps=2, activation_checkpointing=setting, logger=Quiet(), enable_checkpointing=False,
                          enable_progress_bar=False, device="cpu", root_dir=tmp_path)
        trainer.fit(Stack(), loader(make_data()))
        counted[str(setting)] = trainer._run.output.throughput.flops_per_batch
    assert counted["False"] is not None and counted["False"] > 0
    assert counted["['Block']"] == counted["False"]
