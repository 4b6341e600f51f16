"""GradientAccumulationScheduler and LambdaCallback as Lightning's own tests specify them
(tests_pytorch/callbacks/test_gradient_accumulation_scheduler.py, test_lambda_function.py), each
scenario run under Lightning and here, with only the imports changed, and compared: the
optimizer's `zero_grad` calls and steps per epoch, `trainer.accumulate_grad_batches` at every
epoch start, the weights, the refused schedules and settings, the warning for a module that
overrides `optimizer_step`/`optimizer_zero_grad`, and every hook a LambdaCallback is given.

Not compared: Lightning's DeepSpeed refusal (no DeepSpeed strategy here); the weights of a
schedule whose last window of an epoch is shorter (a deliberate difference, docs/lightning.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from tests.helpers.lightning_spec import Spec

pytest.importorskip("lightning")

SOURCE = '''
import inspect
import warnings
from functools import partial
from unittest import mock
import torch
from trainer import Callback, Trainer
from callbacks import GradientAccumulationScheduler, LambdaCallback
from trainer.demos.boring_classes import BoringModel

QUIET = dict(logger=False, enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False)


class Seen(Callback):
    def __init__(self):
        self.seen = []

    def on_train_epoch_start(self, trainer, module):
        self.seen.append((trainer.current_epoch, trainer.accumulate_grad_batches, trainer.global_step))


def train(root, accumulate=1, schedule=None, batches=10, epochs=1):
    """Lightning: test_trainer_accumulate_grad_batches_zero_grad, ..._with_callback."""
    original = torch.optim.SGD.zero_grad
    calls = []

    def counted(self, *args, **kwargs):
        calls.append(1)
        return original(self, *args, **kwargs)

    torch.manual_seed(0)
    model, seen = BoringModel(), Seen()
    extra = [GradientAccumulationScheduler(schedule)] if schedule else []
    trainer = Trainer(default_root_dir=root, limit_train_batches=batches, limit_val_batches=1, max_epochs=epochs,
                      accumulate_grad_batches=accumulate, callbacks=[*extra, seen], **QUIET)
    first = trainer.accumulate_grad_batches
    with mock.patch.object(torch.optim.SGD, "zero_grad", counted):
        trainer.fit(model)
    return dict(first=first, calls=len(calls), seen=seen.seen, step=trainer.global_step,
                weights={k: v.detach().clone() for k, v in model.state_dict().items()},
                schedulers=sum(isinstance(cb, GradientAccumulationScheduler) for cb in trainer.callbacks))


def refused(root):
    """Lightning: test_invalid_keys_for_grad_accum_scheduler, test_invalid_values_for_grad_accum_scheduler."""
    out = []
    for schedule in ({1: 2, -3: 4}, {0: 2, "2": 1}, {1: 0, 3: 4}, {0: 2, 2: "2"}, {}):
        try:
            GradientAccumulationScheduler(scheduling=schedule)
            out.append(False)
        except Exception:  # Lightning: MisconfigurationException, TypeError for {}; ours: ValueError
            out.append(True)
    return out


def on_train_start_checks(root):
    """Lightning: test_unsupported_manual_optimization, test_warn_if_model_has_overridden_optimization_hooks,
    test_raises_when_accumulate_grad_batches_with_callback."""
    out = []

    class Step(BoringModel):
        def optimizer_step(self, *args, **kwargs):
            super().optimizer_step(*args, **kwargs)

    class ZeroGrad(BoringModel):
        def optimizer_zero_grad(self, *args, **kwargs):
            super().optimizer_zero_grad(*args, **kwargs)

    manual = BoringModel()
    manual.automatic_optimization = False
    for model, schedule in ((manual, {1: 2}), (Step(), {1: 2}), (ZeroGrad(), {1: 2}), (Step(), {0: 1}), (BoringModel(), {1: 2})):
        trainer = Trainer(default_root_dir=root, **QUIET)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                GradientAccumulationScheduler(schedule).on_train_start(trainer, model)
                error = None
            except Exception as e:
                error = type(e).__name__
        out.append((error, ["will not be called on every batch" in str(w.message) for w in caught
                            if issubclass(w.category, UserWarning)]))
    trainer = Trainer(default_root_dir=root, accumulate_grad_batches=2, callbacks=[GradientAccumulationScheduler({0: 2})],
                      max_epochs=1, limit_train_batches=2, limit_val_batches=0, **QUIET)
    try:
        trainer.fit(BoringModel())
        out.append(None)
    except ValueError as e:
        out.append("accumulate_grad_batches" in str(e))
    return out


def lambda_hooks(root):
    """Lightning: test_lambda_call (every Callback hook given to a LambdaCallback runs, through a
    fit, a failed resumed fit, a test and a predict)."""
    class Failing(Exception):
        pass

    class Model(BoringModel):
        def on_train_epoch_start(self):
            if self.current_epoch > 1:
                raise Failing("on_exception")

    checker = set()

    def call(hook, *_, **__):
        checker.add(hook)

    hooks = {name for name, _ in inspect.getmembers(Callback, predicate=inspect.isfunction)
             if name.startswith(("on_", "setup", "teardown"))} - {"state_dict", "load_state_dict"}
    kwargs = dict(default_root_dir=root, limit_train_batches=1, limit_val_batches=1, limit_test_batches=1,
                  limit_predict_batches=1, logger=False, enable_progress_bar=False, enable_model_summary=False)
    torch.manual_seed(0)
    model = Model()
    trainer = Trainer(max_epochs=1, callbacks=[LambdaCallback(**{h: partial(call, h) for h in hooks})], **kwargs)
    trainer.fit(model)
    path = root / "first.ckpt"
    trainer.save_checkpoint(path)
    trainer = Trainer(max_epochs=3, callbacks=[LambdaCallback(**{h: partial(call, h) for h in hooks})], **kwargs)
    try:
        trainer.fit(model, ckpt_path=path)
    except Failing:
        pass
    trainer.test(model, verbose=False)
    trainer.predict(model)
    return sorted(hooks - checker), sorted(hooks)
'''

SPEC = Spec(SOURCE, "spec_accumulation")


def same(ours: Any, theirs: Any) -> bool:
    """`==` that compares tensors with `torch.equal`, through dicts, lists and tuples."""
    if isinstance(ours, torch.Tensor) or isinstance(theirs, torch.Tensor):
        return isinstance(ours, torch.Tensor) and isinstance(theirs, torch.Tensor) and torch.equal(ours, theirs)
    if isinstance(ours, dict) and isinstance(theirs, dict):
        return ours.keys() == theirs.keys() and all(same(ours[k], theirs[k]) for k in ours)
    if isinstance(ours, (list, tuple)) and isinstance(theirs, (list, tuple)):
        return len(ours) == len(theirs) and all(same(a, b) for a, b in zip(ours, theirs))
    return bool(ours == theirs)


@pytest.mark.parametrize("options", [
    dict(accumulate=2, batches=8), dict(accumulate=3, batches=8),
    dict(schedule={1: 2, 3: 4}, epochs=4, batches=8), dict(schedule={0: 2, 2: 1}, epochs=3, batches=10),
], ids=["trainer_2", "trainer_3_short_window", "schedule_1_2_3_4", "schedule_0_2_2_1"])
def test_accumulation(options: dict[str, Any], tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("train", tmp_path, **options)
    # Lightning zeroes the gradients once per window; here also when each epoch starts and after
    # each validation (docs/lightning.md, "when gradients are zeroed"): the count is not compared.
    assert theirs["calls"] == theirs["step"] and ours.pop("calls") >= theirs.pop("calls")
    if options.get("accumulate") == 3:  # 8 batches: windows of 3, 3 and 2 (deliberate: a true mean)
        assert not same(ours.pop("weights"), theirs.pop("weights"))
    assert same(ours, theirs), (ours, theirs)


@pytest.mark.parametrize("scenario", ["refused", "on_train_start_checks"])
def test_accumulation_checks(scenario: str, tmp_path: Path) -> None:
    ours, theirs = SPEC.compare(scenario, tmp_path)
    assert same(ours, theirs), (ours, theirs)


def test_lambda_callback_runs_every_hook(tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("lambda_hooks", tmp_path)
    assert ours[0] == theirs[0] == [], (ours, theirs)
    assert set(theirs[1]) <= set(ours[1])  # every hook of Lightning's Callback is one of ours
