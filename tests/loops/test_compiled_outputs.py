"""Tensors the Trainer keeps past a step are its own copies: a compiled graph's outputs (CUDA
graphs reuse their memory on the next replay) or tensors the module changes in place must not
change what was logged or predicted. And what `compile` can't do right is refused or said."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from tests.helpers.reference import RecordingLogger, TinyNet, loader, make_data
from trainer import Trainer

QUIET = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False, num_sanity_val_steps=0, device="cpu")


class ReusedOutput(TinyNet):
    """Logs a tensor, then overwrites it in place, as a CUDA-graph replay overwrites its outputs."""

    def __init__(self) -> None:
        super().__init__(dropout=0.0)
        self.register_buffer("scratch", torch.zeros(()))
        self.logged: list[float] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = super().training_step(batch, batch_idx)
        self.scratch.fill_(float(batch_idx))
        self.log("scratch", self.scratch)
        self.logged.append(float(batch_idx))
        self.scratch.fill_(-1000.0)  # the "next replay"
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.scratch.fill_(7.0)
        self.log("val/scratch", self.scratch, on_step=True, on_epoch=False, prog_bar=True)
        self.scratch.fill_(-1000.0)


def test_a_logged_tensor_is_copied_not_kept_by_reference():
    model = ReusedOutput()
    trainer = Trainer(max_steps=3, log_every_n_steps=100, **QUIET)
    trainer.fit(model, loader(make_data(40), shuffle=False))
    assert trainer.callback_metrics["scratch"] == model.logged[-1] == 2.0
    trainer.validate(model, loader(make_data(8), shuffle=False))
    # a per-step value of an evaluation is shown by the bar only (never a callback metric, as in Lightning)
    assert "val/scratch" not in trainer.callback_metrics and trainer.progress_bar_metrics["val/scratch"] == 7.0


class Predicts(TinyNet):
    """predict_step returns nested tensors that alias the step's own: a buffer it changes later
    and the batch itself."""

    def __init__(self) -> None:
        super().__init__(dropout=0.0)
        self.register_buffer("state", torch.zeros(2))
        self.seen: list[Any] = []

    def predict_step(self, batch: Any, batch_idx: int) -> Any:
        x, _ = batch
        self.state.fill_(float(batch_idx))
        output = {"y": self(x), "parts": (self.state, [x]), "idx": batch_idx}
        self.seen.append(output)
        return output

    def on_predict_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        assert outputs is self.seen[-1]  # the hooks get the step's own output


def test_predict_keeps_detached_cpu_copies_that_alias_nothing():
    model = Predicts()
    data = make_data(12)
    outputs = Trainer(**QUIET).predict(model, DataLoader(data, batch_size=4))
    assert len(outputs) == 3
    for index, (kept, own) in enumerate(zip(outputs, model.seen)):
        assert kept["idx"] == index and set(kept) == {"y", "parts", "idx"}
        state, (x,) = kept["parts"][0], kept["parts"][1]
        assert isinstance(kept["parts"], tuple) and isinstance(kept["parts"][1], list)
        for copy, original in ((kept["y"], own["y"]), (state, own["parts"][0]), (x, own["parts"][1][0])):
            assert copy.device.type == "cpu" and not copy.requires_grad
            assert copy.untyped_storage().data_ptr() != original.untyped_storage().data_ptr()
        assert state.tolist() == [float(index)] * 2  # the buffer moved on; the prediction did not
    assert model.state.tolist() == [2.0, 2.0]
    assert torch.equal(outputs[0]["parts"][1][0], data.tensors[0][:4])


@pytest.mark.parametrize("options", [{"mode": "reduce-overhead"}, {"mode": "max-autotune"}, {"options": {"triton.cudagraphs": True}}])
def test_cuda_graphs_with_accumulation_are_refused_at_construction(options):
    with pytest.raises(ValueError, match=r"accumulate_grad_batches=2\): CUDA graphs .* Expected accumulate_grad_batches=1"):
        Trainer(compile=options, accumulate_grad_batches=2, **QUIET)
    Trainer(compile=options, accumulate_grad_batches=1, **QUIET)  # one micro-batch per step: accepted
    Trainer(compile={"mode": "max-autotune-no-cudagraphs"}, accumulate_grad_batches=2, **QUIET)
    Trainer(compile={"mode": "max-autotune", "options": {"triton.cudagraphs": False}}, accumulate_grad_batches=2, **QUIET)


def test_cuda_graphs_with_accumulation_set_later_are_refused_too():
    trainer = Trainer(compile={"mode": "reduce-overhead"}, **QUIET)
    with pytest.raises(ValueError, match=r"trainer.accumulate_grad_batches = 4 \(set after construction.*CUDA graphs"):
        trainer.accumulate_grad_batches = 4
    assert trainer.accumulate_grad_batches == 1
    trainer.accumulate_grad_batches = 1  # one micro-batch per step: accepted
    Trainer(compile={"mode": "default"}, **QUIET).accumulate_grad_batches = 4


def test_a_gradient_accumulation_schedule_under_cuda_graphs_is_refused_before_any_step():
    from callbacks import GradientAccumulationScheduler

    model = TinyNet(dropout=0.0)
    steps = []
    model.on_train_batch_start = lambda batch, batch_idx: steps.append(batch_idx)  # type: ignore[method-assign]
    trainer = Trainer(compile={"mode": "reduce-overhead"}, max_epochs=2,
                      callbacks=[GradientAccumulationScheduler({0: 1, 1: 4})], **QUIET)
    with pytest.raises(ValueError, match=r"accumulate_grad_batches = 4 .*GradientAccumulationScheduler"):
        trainer.fit(model, loader(make_data(16)))
    assert steps == [] and trainer.global_step == 0
    # the same schedule without CUDA graphs runs
    Trainer(max_epochs=2, callbacks=[GradientAccumulationScheduler({0: 1, 1: 4})], **QUIET).fit(
        TinyNet(dropout=0.0), loader(make_data(16)))


class Graphs:
    """A dynamo backend that counts the graphs it is given and runs them eagerly."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, graph: torch.fx.GraphModule, inputs: Any) -> Any:
        self.count += 1
        return graph.forward


class NoForward(TinyNet):
    """Lightning's usual shape: no forward, training_step calls the submodule."""

    forward = torch.nn.Module.forward  # TinyNet's forward removed

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)


class ForwardUnused(TinyNet):
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)  # not self(x): forward never runs


def test_a_module_without_forward_has_its_submodules_compiled(recwarn):
    torch.manual_seed(0)
    model, graphs = NoForward(dropout=0.0), Graphs()
    reference = TinyNet(dropout=0.0)
    reference.load_state_dict(model.state_dict())
    Trainer(max_steps=4, compile={"backend": graphs}, **QUIET).fit(model, loader(make_data(), shuffle=False))
    assert graphs.count >= 1  # self.net ran compiled
    assert not [w for w in recwarn if "compile" in str(w.message)]
    assert set(model.state_dict()) == set(reference.state_dict())  # keys unchanged (compiled in place)


def test_compile_that_compiles_nothing_that_runs_warns_once():
    model, graphs = ForwardUnused(dropout=0.0), Graphs()
    with pytest.warns(UserWarning, match=r"compiled ForwardUnused.forward, but the first training step did not call it") as caught:
        trainer = Trainer(max_steps=4, compile={"backend": graphs}, **QUIET)
        trainer.fit(model, loader(make_data(), shuffle=False))
        trainer.fit(model, loader(make_data(), shuffle=False))  # a later fit: not said again
    assert graphs.count == 0 and len([w for w in caught if "first training step" in str(w.message)]) == 1


class GraphMemory(torch.autograd.Function):
    """Returns its input in one buffer that every call overwrites, as a CUDA-graph replay does
    with a compiled forward's outputs."""

    buffer = torch.zeros(())

    @staticmethod
    def forward(ctx: Any, value: torch.Tensor) -> torch.Tensor:
        GraphMemory.buffer.copy_(value)
        return GraphMemory.buffer.view_as(GraphMemory.buffer)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad


class ReplayedLoss(TinyNet):
    def __init__(self) -> None:
        super().__init__(dropout=0.0)
        self.losses: list[float] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = GraphMemory.apply(super().training_step(batch, batch_idx))
        self.losses.append(float(loss))
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        GraphMemory.apply(super().training_step(batch, batch_idx) + 100.0)  # the same memory, another value


def test_the_last_steps_loss_is_a_copy_when_outputs_are_graph_memory(monkeypatch, tmp_path):
    """The last step is not a logging step and the epoch's validation runs before its scalars
    are written: the written loss must be the step's, not what validation left in the memory."""
    import trainer.loops.automatic as automatic

    assert automatic.copies_kept_losses({"mode": "reduce-overhead"}) and not automatic.copies_kept_losses(False)
    monkeypatch.setattr(automatic, "copies_kept_losses", lambda compile: True)  # no compile on the CPU: stand in
    model, logger = ReplayedLoss(), RecordingLogger()
    trainer = Trainer(max_epochs=1, log_every_n_steps=5, logger=logger, enable_checkpointing=False,
                      enable_progress_bar=False, num_sanity_val_steps=0, device="cpu", root_dir=tmp_path)
    trainer.fit(model, loader(make_data(28)), loader(make_data(8, seed=3), shuffle=False))  # 7 steps
    written = {step: row["train/loss"] for step, row in logger.rows if "train/loss" in row}
    assert sorted(written) == [5, 7]
    assert written[7] == pytest.approx(model.losses[-1])
