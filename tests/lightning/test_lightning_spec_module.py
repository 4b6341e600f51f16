"""The LightningModule's own API as Lightning's tests specify it (tests_pytorch/core/
test_lightning_module.py, and what test_trainer.py checks of it), each scenario run under
Lightning and here, with only the imports changed, and compared: `toggle_optimizer`/
`untoggle_optimizer` and `toggled_optimizer` with shared and frozen parameters, `optimizers()`
and `lr_schedulers()` in each form `configure_optimizers` returns, `configure_gradient_clipping`
and the `clip_gradients` arguments refused, `self.trainer` reaching a nested module, and hooks
where `self.log` is taken.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.lightning_spec import Spec

pytest.importorskip("lightning")

SOURCE = '''
import torch
from torch import nn
from torch.optim import SGD, Adam
from trainer import LightningModule, Trainer
from trainer.demos.boring_classes import BoringModel

QUIET = dict(enable_progress_bar=False, enable_model_summary=False, logger=False, enable_checkpointing=False)


from tests.helpers.lightning_spec import weights


def toggles(root):
    """Lightning: test_toggle_untoggle_3_optimizers_shared_parameters, test_optimizer_toggle_model_context_manager."""
    seen = []

    class TestModel(BoringModel):
        def __init__(self):
            super().__init__()
            self.automatic_optimization = False
            self.layer_1 = nn.Sequential(nn.Linear(32, 4), nn.ReLU(), nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 32))
            self.layer_2 = nn.Sequential(nn.ReLU(), nn.Linear(32, 4), nn.ReLU(), nn.Linear(4, 32))
            self.layer_3 = nn.Sequential(nn.ReLU(), nn.Linear(32, 4), nn.ReLU(), nn.Linear(4, 32))
            self.layer_1[2].weight.requires_grad = False
            self.layer_2[1].weight.requires_grad = False
            self.layer_3[3].weight.requires_grad = False

        def forward(self, x):
            return self.layer(self.layer_3(self.layer_2(self.layer_1(x))))

        def flags(self):
            return [n for n, p in self.named_parameters() if p.requires_grad]

        def training_step(self, batch, batch_idx):
            for i, opt in enumerate(self.optimizers()):
                if i == 2:
                    with self.toggled_optimizer(opt):
                        seen.append(("context", i, self.flags()))
                        self._train(opt, batch)
                else:
                    self.toggle_optimizer(opt)
                    seen.append(("toggled", i, self.flags()))
                    self._train(opt, batch)
                    self.untoggle_optimizer(opt)
                seen.append(("after", i, self.flags()))

        def _train(self, opt, batch):
            loss = self.step(batch)
            opt.zero_grad()
            self.manual_backward(loss)
            opt.step()

        @staticmethod
        def chain(*gens):
            for gen in gens:
                yield from gen

        def configure_optimizers(self):
            return [SGD(self.chain(self.layer_1.parameters(), self.layer_2.parameters()), lr=0.1),
                    Adam(self.chain(self.layer_2.parameters(), self.layer_3.parameters(),
                                    self.layer.parameters()), lr=0.1),
                    SGD(self.chain(self.layer_3.parameters(), self.layer_1.parameters()), lr=0.1)]

    torch.manual_seed(0)
    model = TestModel()
    trainer = Trainer(default_root_dir=root, max_epochs=1, limit_train_batches=2, limit_val_batches=0, **QUIET)
    trainer.fit(model)
    return {"seen": seen, "weights": weights(model)}


def optimizers_and_schedulers(root, form):
    """What `self.optimizers()`, `self.optimizers(use_pl_optimizer=False)` and `self.lr_schedulers()`
    return for each form of `configure_optimizers` (Lightning: test_optimizers.py's forms, read from the module)."""
    seen = []

    class TestModel(BoringModel):
        def __init__(self):
            super().__init__()
            self.automatic_optimization = False

        def training_step(self, batch, batch_idx):
            opts = self.optimizers()
            raw = self.optimizers(use_pl_optimizer=False)
            scheds = self.lr_schedulers()
            listed = opts if isinstance(opts, list) else [opts]
            seen.append({
                "optimizers": type(opts).__name__ if isinstance(opts, list) else "one",
                "count": len(listed),
                "raw": [type(o).__name__ for o in (raw if isinstance(raw, list) else [raw])],
                "wraps": [o.optimizer is r for o, r in zip(listed, raw if isinstance(raw, list) else [raw])],
                "schedulers": None if scheds is None else (
                    [type(s).__name__ for s in scheds] if isinstance(scheds, list) else type(scheds).__name__),
            })
            for opt in listed:
                loss = self.step(batch)
                opt.zero_grad()
                self.manual_backward(loss)
                opt.step()
            for s in (scheds if isinstance(scheds, list) else [scheds] if scheds is not None else []):
                s.step()

        def configure_optimizers(self):
            sgd = SGD(self.parameters(), lr=0.1)
            step = torch.optim.lr_scheduler.StepLR(sgd, 1, gamma=0.5)
            if form == "one":
                return sgd
            if form == "dict":
                return {"optimizer": sgd, "lr_scheduler": step}
            if form == "dict_config":
                return {"optimizer": sgd, "lr_scheduler": {"scheduler": step, "interval": "step"}}
            if form == "lists":
                adam = Adam(self.parameters(), lr=0.01)
                return [sgd, adam], [step, torch.optim.lr_scheduler.ExponentialLR(adam, 0.9)]
            if form == "tuple_of_dicts":
                adam = Adam(self.parameters(), lr=0.01)
                return ({"optimizer": sgd, "lr_scheduler": step}, {"optimizer": adam})

    torch.manual_seed(0)
    model = TestModel()
    trainer = Trainer(default_root_dir=root, max_epochs=1, limit_train_batches=2, limit_val_batches=0, **QUIET)
    trainer.fit(model)
    return {"seen": seen, "weights": weights(model),
            "lrs": [g["lr"] for o in trainer.optimizers for g in o.param_groups]}


def gradient_clipping_hook(root):
    """Lightning: test_lightning_module_configure_gradient_clipping."""
    seen = []

    class TestModel(BoringModel):
        def configure_gradient_clipping(self, optimizer, gradient_clip_val, gradient_clip_algorithm):
            # Lightning passes the Trainer's own value (None when not given); here "norm", its default
            seen.append((gradient_clip_val, gradient_clip_algorithm == self.trainer.gradient_clip_algorithm))
            for pg in optimizer.param_groups:
                for p in pg["params"]:
                    p.grad.clamp_(min=0, max=1e-2)

    torch.manual_seed(0)
    model = TestModel()
    trainer = Trainer(default_root_dir=root, max_epochs=1, limit_train_batches=2, limit_val_batches=0,
                      gradient_clip_val=1e-4, **QUIET)
    trainer.fit(model)
    return {"seen": seen, "weights": weights(model)}


def clip_arguments_refused(root):
    """Lightning: test_lightning_module_configure_gradient_clipping_different_argument_values."""
    out = []
    for trainer_args, clip_args in (({"gradient_clip_val": 1e-4}, {"gradient_clip_val": 1e-2}),
                                    ({"gradient_clip_algorithm": "norm"}, {"gradient_clip_algorithm": "foo"}),
                                    ({"gradient_clip_val": 1e-4}, {"gradient_clip_val": 1e-4})):

        class TestModel(BoringModel):
            def configure_gradient_clipping(self, optimizer, gradient_clip_val, gradient_clip_algorithm):
                self.clip_gradients(optimizer, **clip_args)

        torch.manual_seed(0)
        trainer = Trainer(default_root_dir=root, max_epochs=1, limit_train_batches=1, limit_val_batches=0,
                          **trainer_args, **QUIET)
        try:
            trainer.fit(TestModel())
            out.append(None)
        except Exception:
            out.append("error")
    return out


def nested_trainer_reference(root):
    """Lightning: test_trainer_reference_recursively, test_property_current_epoch/global_step/logger(s)."""
    ensemble = LightningModule()
    inner = LightningModule()
    ensemble.inner = inner
    out = {}
    try:
        ensemble.trainer
        out["unattached"] = None
    except RuntimeError:
        out["unattached"] = "RuntimeError"
    seen = []

    class TestModel(BoringModel):
        def __init__(self):
            super().__init__()
            self.inner = BoringModel()

        def training_step(self, batch, batch_idx):
            seen.append((self.inner.trainer is self.trainer, self.current_epoch, self.global_step,
                         self.inner.current_epoch, self.inner.global_step, self.logger is None, self.loggers))
            return super().training_step(batch, batch_idx)

    torch.manual_seed(0)
    model = TestModel()
    trainer = Trainer(default_root_dir=root, max_epochs=2, limit_train_batches=2, limit_val_batches=0, **QUIET)
    trainer.fit(model)
    out["seen"] = seen
    return out


def log_refused(root, hook):
    """Where `self.log` is taken (Lightning: test_logger_connector.py::test_fx_validator_integration; where
    Lightning refuses it, in on_fit_start, on_train_end, predict_step, ..., it is taken here)."""
    calls = []

    class TestModel(BoringModel):
        pass

    def logging_hook(self, *args, **kwargs):
        try:
            self.log("x", 1.0)
            calls.append("logged")
        except Exception as err:
            calls.append(type(err).__name__ if isinstance(err, ValueError) else "error")

    setattr(TestModel, hook, logging_hook)
    torch.manual_seed(0)
    model = TestModel()
    trainer = Trainer(default_root_dir=root, max_epochs=1, limit_train_batches=1, limit_val_batches=1,
                      limit_test_batches=1, limit_predict_batches=1, num_sanity_val_steps=0, **QUIET)
    trainer.fit(model)
    trainer.test(model, verbose=False)
    trainer.predict(model)
    return sorted(set(calls))
'''

SPEC = Spec(SOURCE, "spec_module")


def test_toggle_and_untoggle_optimizers(tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("toggles", tmp_path)
    assert ours == theirs


@pytest.mark.parametrize("form", ["one", "dict", "dict_config", "lists", "tuple_of_dicts"])
def test_optimizers_and_lr_schedulers(form: str, tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("optimizers_and_schedulers", tmp_path, form=form)
    assert ours == theirs


def test_configure_gradient_clipping(tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("gradient_clipping_hook", tmp_path)
    assert ours == theirs


def test_clip_gradients_arguments_refused(tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("clip_arguments_refused", tmp_path)
    assert ours == theirs == ["error", "error", None]


def test_nested_module_reaches_the_trainer(tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("nested_trainer_reference", tmp_path)
    assert ours == theirs


@pytest.mark.parametrize("hook", ["on_train_start", "on_before_backward", "on_test_batch_start"])
def test_where_self_log_is_taken(hook: str, tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("log_refused", tmp_path, hook=hook)
    assert ours == theirs
