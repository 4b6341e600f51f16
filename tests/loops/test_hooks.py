"""The hook order, compared call by call with the table in docs/hooks.md.

The expected sequences are built the way Lightning's own
`tests/tests_pytorch/models/test_hooks.py` builds them (`_auto_train_batch`,
`_manual_train_batch`, `_eval_epoch`, `_predict_batch`), with our documented differences:
`on_before_zero_grad` runs after the optimizer step (we zero right after stepping), and at
`on_train_epoch_end`/`on_<stage>_epoch_end` the module's hook runs before the callbacks'.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from tests.helpers.reference import TinyNet, assert_same_weights, loader, make_data, make_model
from trainer import Callback, Module, Trainer
from trainer.callback import HOOKS

QUIET = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False, device="cpu")
STEPS = ("training_step", "validation_step", "test_step", "predict_step", "configure_optimizers")


class Recorder(Callback):
    def __init__(self, calls: list[str]) -> None:
        self.calls = calls


def _record_callback(hook: str) -> Any:
    def method(self: Recorder, trainer: Any, module: Any, *args: Any, **kwargs: Any) -> None:
        assert trainer is not None and module is not None
        self.calls.append(f"Callback.{hook}" + (f"({kwargs['stage'].value})" if hook in ("setup", "teardown") else ""))

    return method


for _hook in HOOKS:
    setattr(Recorder, _hook, _record_callback(_hook))


class HookedNet(TinyNet):
    def __init__(self, calls: list[str], manual: bool = False) -> None:
        super().__init__(dropout=0.0)
        self.automatic_optimization = not manual
        object.__setattr__(self, "recorded", calls)

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        self.recorded.append("training_step")
        loss = super().training_step(batch, batch_idx)
        if self.automatic_optimization:
            return loss
        opt = self.optimizers()
        opt.zero_grad()
        self.manual_backward(loss)
        opt.step()
        return {"loss": loss.detach()}

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.recorded.append("validation_step")

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self.recorded.append("test_step")

    def predict_step(self, batch: Any, batch_idx: int) -> Any:
        self.recorded.append("predict_step")
        return batch_idx

    def configure_optimizers(self) -> Any:
        self.recorded.append("configure_optimizers")
        return super().configure_optimizers()


def _record_module(hook: str) -> Any:
    def method(self: HookedNet, *args: Any, **kwargs: Any) -> None:  # setup/teardown: stage by name, as Lightning passes it
        self.recorded.append(hook + (f"({kwargs['stage'].value})" if hook in ("setup", "teardown") else ""))

    return method


for _hook in HOOKS:
    if hasattr(Module, _hook):
        setattr(HookedNet, _hook, _record_module(_hook))


def both(hook: str, arg: str | None = None) -> list[str]:
    """Callbacks first, then the module: Lightning's order for most hooks."""
    suffix = f"({arg})" if arg else ""
    return [f"Callback.{hook}{suffix}", f"{hook}{suffix}"]


def module_first(hook: str) -> list[str]:
    return [hook, f"Callback.{hook}"]


def auto_train_batches(n: int, k: int) -> list[str]:
    out: list[str] = []
    for i in range(n):
        window_start = i // k * k
        last = i == min(window_start + k, n) - 1
        out += both("on_train_batch_start") + ["training_step"]
        if i == window_start:  # Lightning's place: zero_grad before the window's first backward
            out += both("on_before_zero_grad")
        out += both("on_before_backward") + both("on_after_backward")
        if last:
            out += both("on_before_optimizer_step") + ["Callback.on_train_step_end"]
        out += both("on_train_batch_end")
    return out


def manual_train_batches(n: int) -> list[str]:
    out: list[str] = []
    for _ in range(n):
        out += both("on_train_batch_start") + ["training_step"]
        out += both("on_before_backward") + both("on_after_backward") + both("on_before_optimizer_step")
        out += ["Callback.on_train_step_end"] + both("on_train_batch_end")
    return out


def eval_epoch(stage: str, n: int) -> list[str]:
    out = both(f"on_{stage}_start") + both(f"on_{stage}_epoch_start")
    for _ in range(n):
        out += both(f"on_{stage}_batch_start") + [f"{stage}_step"] + both(f"on_{stage}_batch_end")
    if stage == "predict":
        return out + both("on_predict_epoch_end") + both("on_predict_end")
    return out + module_first(f"on_{stage}_epoch_end") + both(f"on_{stage}_end")


def fit_sequence(epochs: int, n: int, k: int, val: int, manual: bool, sanity: int = 2) -> list[str]:
    out = both("setup", "fit") + ["configure_optimizers"] + both("on_fit_start")
    if sanity:  # Lightning calls only the callbacks' sanity hooks; the module has none
        out += ["Callback.on_sanity_check_start"] + eval_epoch("validation", sanity) + ["Callback.on_sanity_check_end"]
    out += both("on_train_start")
    for _ in range(epochs):
        out += both("on_train_epoch_start")
        out += manual_train_batches(n) if manual else auto_train_batches(n, k)
        out += eval_epoch("validation", val) + module_first("on_train_epoch_end")
    return out + both("on_train_end") + both("on_fit_end") + both("teardown", "fit")


@pytest.mark.parametrize(("k", "manual"), [(1, False), (3, False), (1, True)], ids=["auto-k1", "auto-k3", "manual"])
def test_fit_hook_order(k, manual):
    calls: list[str] = []
    model = HookedNet(calls, manual=manual)
    train = DataLoader(make_data(n=28), batch_size=4)  # 7 batches: windows of 3, 3, 1 with k=3
    val = DataLoader(make_data(n=6), batch_size=4)  # 2 batches
    Trainer(max_epochs=2, accumulate_grad_batches=k, callbacks=[Recorder(calls)], **QUIET).fit(model, train, val)
    assert calls == fit_sequence(2, 7, k, 2, manual)


@pytest.mark.parametrize(("verb", "stage"), [("validate", "validation"), ("test", "test"), ("predict", "predict")])
def test_evaluation_hook_order(verb, stage):
    calls: list[str] = []
    model = HookedNet(calls)
    trainer = Trainer(callbacks=[Recorder(calls)], **QUIET)
    getattr(trainer, verb)(model, DataLoader(make_data(n=10), batch_size=4))  # 3 batches
    assert calls == both("setup", verb) + eval_epoch(stage, 3) + both("teardown", verb)


def test_resume_inside_an_epoch_calls_on_train_epoch_start_and_load_hooks(tmp_path):
    first = Trainer(max_steps=3, root_dir=tmp_path, logger=False, enable_progress_bar=False)
    first.fit(HookedNet([]), DataLoader(make_data(n=28), batch_size=4))
    calls: list[str] = []
    Trainer(max_steps=5, callbacks=[Recorder(calls)], **QUIET).fit(
        HookedNet(calls), DataLoader(make_data(n=28), batch_size=4), ckpt_path=first.log_dir / "last.ckpt"
    )
    start = calls.index("configure_optimizers")
    assert calls[start + 1 : start + 3] == module_first("on_load_checkpoint")
    assert calls.count("on_train_epoch_start") == 1 and calls.count("training_step") == 2
    # Then the checkpoint's restore once more, so it wins over what the epoch-start hooks reset.
    epoch_start = calls.index("Callback.on_train_epoch_start")
    assert calls[epoch_start : epoch_start + 5] == (
        both("on_train_epoch_start") + module_first("on_load_checkpoint") + ["Callback.on_train_batch_start"]
    )


def test_save_hooks_run_callbacks_first_and_the_module_adds_its_state(tmp_path):
    calls: list[str] = []
    trainer = Trainer(max_steps=1, callbacks=[Recorder(calls)], **QUIET)
    trainer.fit(HookedNet(calls), DataLoader(make_data(n=8), batch_size=4))
    calls.clear()
    trainer.save_checkpoint(tmp_path / "x.ckpt")
    assert calls == both("on_save_checkpoint")


def test_on_train_batch_end_sees_the_step_it_completed():
    seen: list[tuple[int, int, bool]] = []

    class Watch(Callback):
        def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            grads = any(p.grad is not None for p in module.parameters())
            seen.append((batch_idx, trainer.global_step, grads))

    Trainer(max_epochs=1, accumulate_grad_batches=2, callbacks=[Watch()], **QUIET).fit(
        TinyNet(), DataLoader(make_data(n=20), batch_size=4)  # 5 batches: windows 2, 2, 1
    )
    # After a window's last batch: the step is counted and its gradients already zeroed.
    assert seen == [(0, 0, True), (1, 1, False), (2, 1, True), (3, 2, False), (4, 3, False)]
    # With an `on_before_zero_grad` hook (HookedNet defines every hook) the zeroing happens where
    # Lightning's does, before the next window's first backward: the hook sees the step's gradients.
    seen.clear()
    Trainer(max_epochs=1, accumulate_grad_batches=2, callbacks=[Watch()], **QUIET).fit(
        HookedNet([]), DataLoader(make_data(n=20), batch_size=4)
    )
    assert seen == [(0, 0, True), (1, 1, True), (2, 1, True), (3, 2, True), (4, 3, True)]


def test_unused_hooks_are_not_looked_up_on_the_hot_path():
    """Hooks nobody overrides cost nothing: the dispatcher holds no target for them."""
    trainer = Trainer(max_steps=1, **QUIET)
    trainer.fit(TinyNet(), DataLoader(make_data(n=8), batch_size=4))
    assert not any(trainer._run.hooks.wants(hook) for hook in HOOKS)
    assert math.isfinite(trainer.callback_metrics["train/mse"])


def test_hooks_lists_every_hook_of_callback_in_its_order():
    """The dispatcher's list of hooks (trainer/loops/hooks.py) is exactly what Callback defines."""
    from trainer import Callback

    defined = [name for name in vars(Callback) if (name.startswith("on_") or name in ("setup", "teardown"))]
    assert list(HOOKS) == defined


class _OutputsSeen(Callback):
    def __init__(self) -> None:
        self.outputs: list[Any] = []

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.outputs.append(outputs)


def _outputs_run(module_base: type, trainer_class: type, callback_base: type, accumulate: int, manual: bool,
                 **quiet: Any) -> tuple[list[Any], list[torch.Tensor]]:
    """on_train_batch_end's `outputs` for a training_step returning a loss, a dict with an
    extra key, or None (every third batch), under automatic or manual optimization."""
    returned: list[torch.Tensor] = []

    class Net(module_base):  # type: ignore[misc,valid-type]
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)
            self.automatic_optimization = not manual

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            loss = self.layer(batch[0]).pow(2).mean()
            returned.append(loss.detach())
            if manual:
                opt = self.optimizers()
                opt.zero_grad()
                self.manual_backward(loss)
                opt.step()
            if batch_idx % 3 == 2:
                return None
            return {"loss": loss, "extra": batch_idx} if batch_idx % 3 == 1 else loss

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    seen = type("Seen", (callback_base,), dict(_OutputsSeen.__dict__))()
    torch.manual_seed(0)
    data = DataLoader(TensorDataset(torch.randn(12, 2)), batch_size=2)
    trainer_class(max_epochs=1, callbacks=[seen], accumulate_grad_batches=1 if manual else accumulate,
                  enable_progress_bar=False, logger=False, enable_checkpointing=False, **quiet).fit(Net(), data)
    return seen.outputs, returned


@pytest.mark.parametrize("accumulate", [1, 2])
def test_on_train_batch_end_outputs_as_lightning(accumulate: int) -> None:
    """Lightning's `outputs`: {"loss": the loss divided by the accumulation, detached, **the
    other returned keys}; {} for a skipped batch."""
    outputs, returned = _outputs_run(Module, Trainer, Callback, accumulate, manual=False)
    for index, (output, loss) in enumerate(zip(outputs, returned, strict=True)):
        if index % 3 == 2:
            assert output == {}
            continue
        assert set(output) == ({"loss", "extra"} if index % 3 == 1 else {"loss"})
        assert output["loss"].requires_grad is False and torch.equal(output["loss"], loss / accumulate)
    lightning = pytest.importorskip("lightning")
    theirs, _ = _outputs_run(lightning.LightningModule, lightning.Trainer, lightning.Callback, accumulate, manual=False,
                             enable_model_summary=False)
    assert [{k: (v.item() if isinstance(v, torch.Tensor) else v) for k, v in o.items()} for o in outputs] == \
        [{k: (v.item() if isinstance(v, torch.Tensor) else v) for k, v in o.items()} for o in theirs]


def test_on_train_batch_end_outputs_in_manual_optimization() -> None:
    """Lightning's manual optimization: the returned dict, {"loss": tensor} for a tensor, {} for None."""
    outputs, returned = _outputs_run(Module, Trainer, Callback, 1, manual=True)
    assert [set(o) for o in outputs[:3]] == [{"loss"}, {"loss", "extra"}, set()]
    assert torch.equal(outputs[0]["loss"].detach(), returned[0])


# ---------------------------------------------- callbacks: order against the module, dispatch, stop, interrupt
class EventRecorder(Callback):
    def __init__(self):
        self.events = []

    def on_fit_start(self, trainer, module):
        self.events.append("fit_start")

    def on_train_epoch_start(self, trainer, module):
        self.events.append(f"epoch_start{trainer.current_epoch}")

    def on_before_optimizer_step(self, trainer, module, optimizer):
        assert all(p.grad is not None for p in module.parameters())
        self.events.append("step")

    def on_validation_epoch_end(self, trainer, module):
        self.events.append("val_end")

    def on_train_epoch_end(self, trainer, module):
        self.events.append("epoch_end")

    def on_fit_end(self, trainer, module):
        self.events.append("fit_end")


def test_hook_order_and_module_hooks_first():
    order = []

    class WithHooks(TinyNet):
        def on_train_epoch_end(self):
            order.append("module")

    class After(Callback):
        def on_train_epoch_end(self, trainer, module):
            order.append("callback")

    recorder = EventRecorder()
    torch.manual_seed(0)
    trainer = Trainer(max_epochs=2, accumulate_grad_batches=5, callbacks=[recorder, After()], **QUIET)
    trainer.fit(WithHooks(), loader(make_data()), val_loader=loader(make_data(8)))
    assert recorder.events == ["fit_start", "val_end",  # the sanity check (2 validation batches)
                               "epoch_start0", "step", "step", "val_end", "epoch_end",
                               "epoch_start1", "step", "step", "val_end", "epoch_end", "fit_end"]
    assert order == ["module", "callback"] * 2


def test_dispatch_only_to_overriding_callbacks():
    from trainer.loops.hooks import Dispatcher

    dispatcher = Dispatcher(None, [EventRecorder(), Callback()])
    assert len(dispatcher._targets["on_fit_start"]) == 1
    assert dispatcher._targets["on_train_batch_start"] == []
    assert not dispatcher.wants("on_train_batch_end")


def test_request_stop_from_a_callback():
    class StopAtThree(Callback):
        def on_train_step_end(self, trainer, module, stepped):
            if trainer.global_step == 3:
                trainer.request_stop()

    trainer = Trainer(max_epochs=3, callbacks=[StopAtThree()], **QUIET)
    trainer.fit(make_model(), loader(make_data()))
    assert trainer.global_step == 3


def test_interrupt_keeps_last_completed_step(tmp_path):
    class Interrupt(TinyNet):
        def training_step(self, batch, batch_idx):
            if self.calls == 7:
                raise KeyboardInterrupt
            return super().training_step(batch, batch_idx)

    torch.manual_seed(0)
    model = Interrupt()
    trainer = Trainer(accumulate_grad_batches=2, logger=False, enable_progress_bar=False, device="cpu", root_dir=tmp_path)
    torch.manual_seed(1)
    with pytest.raises(KeyboardInterrupt):
        trainer.fit(model, loader(make_data()))
    assert trainer.global_step == 3  # micro-batches 0..5 = 3 steps; the 4th window was cut
    assert all(p.grad is None for p in model.parameters())  # the partial window was dropped
    ref = make_model()
    torch.manual_seed(1)
    stopped = Trainer(max_steps=3, accumulate_grad_batches=2, **QUIET)
    stopped.fit(ref, loader(make_data()))
    assert_same_weights(ref, model)
    assert (trainer.log_dir / "last.ckpt").is_file()
    # The process is usable: the same trainer continues.
    model.calls = 100
    trainer.fit(model, loader(make_data()))
    assert trainer.global_step == 5 and trainer.current_epoch == 1
