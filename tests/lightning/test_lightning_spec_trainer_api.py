"""The Trainer's calls as Lightning's own tests specify them (tests_pytorch/trainer/test_trainer.py,
core/test_datamodules.py, trainer/connectors/test_checkpoint_connector.py), each scenario run
under Lightning and here, with only the imports changed, and compared: what `predict` returns
(one or several loaders, `return_predictions=False`), `validate`/`test` with `ckpt_path`
(a file, "best", "last") and `test()` after fit without a model, a DataModule's `state_dict`
in the checkpoint and back through `fit(ckpt_path=...)`, the `setup`/`teardown`/`prepare_data`
calls of each stage, `on_exception` and `trainer.interrupted`, `num_sanity_val_steps=-1`, and
repeated `fit` calls at their limits.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.lightning_spec import Spec

pytest.importorskip("lightning")

SOURCE = '''
from pathlib import Path

import torch
from torch.utils.data import DataLoader
from trainer import Callback, Trainer
from callbacks import ModelCheckpoint
from trainer.demos.boring_classes import BoringDataModule, BoringModel, RandomDataset

QUIET = dict(enable_progress_bar=False, enable_model_summary=False)


from tests.helpers.lightning_spec import weights, plain


def predictions(root):
    """Lightning: test_trainer_predict_no_return, test_predict_return_predictions_cpu,
    test_trainer_predict_grad, test_correct_dataloader_idx_in_hooks (the predictions' shape)."""
    grads = []

    class Model(BoringModel):
        def predict_step(self, batch, batch_idx, dataloader_idx=0):
            grads.append(torch.is_grad_enabled())
            return self.layer(batch).sum(1)

    torch.manual_seed(0)
    model = Model()
    trainer = Trainer(default_root_dir=root, logger=False, **QUIET)
    one = DataLoader(RandomDataset(32, 6), batch_size=2)
    two = [one, DataLoader(RandomDataset(32, 4), batch_size=3)]
    out = {"one": [p.tolist() for p in trainer.predict(model, dataloaders=one)],
           "two": [[p.tolist() for p in ps] for ps in trainer.predict(model, dataloaders=two)],
           "none": trainer.predict(model, dataloaders=one, return_predictions=False),
           "none_two": trainer.predict(model, dataloaders=two, return_predictions=False)}
    out["grads"] = sorted(set(grads))
    return out


class Logged(BoringModel):
    def training_step(self, batch, batch_idx):
        out = super().training_step(batch, batch_idx)
        self.log("train_loss", out["loss"])
        return out

    def validation_step(self, batch, batch_idx):
        out = super().validation_step(batch, batch_idx)
        self.log("val_loss", out["x"])
        return out

    def test_step(self, batch, batch_idx):
        out = super().test_step(batch, batch_idx)
        self.log("test_loss", out["y"])
        return out


def checkpoint_paths(root):
    """Lightning: test_checkpoint_path_input, test_tested_checkpoint_path_best, test_checkpoint_path_input_last,
    test_loops_restore (which weights validate/test run with)."""
    torch.manual_seed(0)
    model = Logged()
    checkpoint = ModelCheckpoint(dirpath=root / "ckpts", monitor="val_loss", save_top_k=1, save_last=True)
    trainer = Trainer(default_root_dir=root, max_epochs=3, limit_train_batches=3, limit_val_batches=2,
                      limit_test_batches=2, callbacks=[checkpoint], logger=False, **QUIET)
    trainer.fit(model)
    best = checkpoint.best_model_path
    out = {"best_name": Path(best).name, "final": weights(model)}
    out["test_none"] = plain(trainer.test(verbose=False))  # no model: the best checkpoint (Lightning's rule)
    out["test_best"] = plain(trainer.test(ckpt_path="best", verbose=False))
    out["validate_path"] = plain(trainer.validate(ckpt_path=best, verbose=False))
    out["validate_model"] = plain(trainer.validate(model, verbose=False))
    out["after"] = weights(model)
    reloaded = Logged.load_from_checkpoint(best)
    out["best_weights"] = weights(reloaded)
    return out


class StatefulDM(BoringDataModule):
    def __init__(self):
        super().__init__()
        self.calls = []
        self.loaded = None
        self.count = 0

    def prepare_data(self):
        self.calls.append("prepare_data")

    def setup(self, stage):
        self.calls.append(f"setup:{stage}")
        super().setup(stage)

    def teardown(self, stage):
        self.calls.append(f"teardown:{stage}")

    def train_dataloader(self):
        self.count += 1
        return DataLoader(self.random_train, batch_size=8)

    def state_dict(self):
        return {"count": self.count}

    def load_state_dict(self, state_dict):
        self.loaded = dict(state_dict)


def datamodule_state(root):
    """Lightning: test_dm_checkpoint_save_and_load, test_trainer_setup_call, test_datamodule hooks' calls."""
    calls = []

    class Model(Logged):
        def setup(self, stage):
            calls.append(f"module setup:{stage}")

        def teardown(self, stage):
            calls.append(f"module teardown:{stage}")

    torch.manual_seed(0)
    dm, model = StatefulDM(), Model()
    checkpoint = ModelCheckpoint(dirpath=root / "ckpts", monitor="val_loss")
    trainer = Trainer(default_root_dir=root, max_epochs=1, limit_train_batches=2, limit_val_batches=1,
                      limit_test_batches=1, limit_predict_batches=1, callbacks=[checkpoint], logger=False, **QUIET)
    trainer.fit(model, datamodule=dm)
    path = checkpoint.best_model_path
    out = {}
    trainer.validate(model, datamodule=dm, verbose=False)
    trainer.test(model, datamodule=dm, verbose=False)
    trainer.predict(model, datamodule=dm)
    dm2 = StatefulDM()
    trainer2 = Trainer(default_root_dir=root, max_epochs=2, limit_train_batches=2, limit_val_batches=1,
                       logger=False, enable_checkpointing=False, **QUIET)
    trainer2.fit(Model(), datamodule=dm2, ckpt_path=path)
    out.update(dm_calls=dm.calls, module_calls=calls, loaded=dm2.loaded, resumed_epoch=trainer2.current_epoch,
               resumed_step=trainer2.global_step)
    return out


def on_exception(root):
    """Lightning: test_on_exception_hook, test_trainer_calls_datamodule_on_exception (an error in a hook)."""
    seen = []

    class Raising(Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            if batch_idx == 1:
                raise RuntimeError("boom")

        def on_test_start(self, trainer, pl_module):
            raise ValueError("test boom")

    class Handling(Callback):
        def on_exception(self, trainer, pl_module, exception):
            seen.append(("callback", type(exception).__name__, str(exception), trainer.interrupted))

    class Model(BoringModel):
        pass

    torch.manual_seed(0)
    model = Model()
    trainer = Trainer(default_root_dir=root, callbacks=[Raising(), Handling()], max_epochs=1, limit_train_batches=3,
                      limit_val_batches=1, logger=False, enable_checkpointing=False, **QUIET)
    out = {"before": trainer.interrupted}
    for fn in ("fit", "test"):
        try:
            getattr(trainer, fn)(model)
        except Exception as err:
            out[fn] = (type(err).__name__, str(err), trainer.interrupted)
    out.update(seen=seen, global_step=trainer.global_step, weights=weights(model))
    return out


def sanity_all(root, limit_val_batches):
    """Lightning: test_num_sanity_val_steps_neg_one, test_num_sanity_val_steps."""
    seen = []

    class Model(BoringModel):
        def validation_step(self, batch, batch_idx, dataloader_idx):
            seen.append((self.trainer.sanity_checking, dataloader_idx, batch_idx))
            return super().validation_step(batch, batch_idx)

        def val_dataloader(self):
            return [DataLoader(RandomDataset(32, 6)), DataLoader(RandomDataset(32, 4), batch_size=2)]

    torch.manual_seed(0)
    trainer = Trainer(default_root_dir=root, num_sanity_val_steps=-1, limit_val_batches=limit_val_batches,
                      max_steps=1, limit_train_batches=1, logger=False, enable_checkpointing=False, **QUIET)
    out = {"num_sanity_val_steps": trainer.num_sanity_val_steps}
    trainer.fit(Model())
    out.update(seen=seen, num_val_batches=list(trainer.num_val_batches),
               num_sanity_val_batches=list(trainer.num_sanity_val_batches))
    return out


def repeated_fit(root, max_steps, max_epochs):
    """Lightning: test_repeated_fit_calls_with_max_epochs_and_steps."""
    torch.manual_seed(0)
    train_data = DataLoader(RandomDataset(32, 20), batch_size=4)
    model = BoringModel()
    trainer = Trainer(default_root_dir=root, max_steps=max_steps, max_epochs=max_epochs, limit_val_batches=0,
                      logger=False, enable_checkpointing=False, **QUIET)
    trainer.fit(model, train_data)
    first = (trainer.global_step, trainer.current_epoch, weights(model))
    trainer.fit(model, train_data)
    return {"first": first, "second": (trainer.global_step, trainer.current_epoch, weights(model))}
'''

SPEC = Spec(SOURCE, "spec_trainer_api")


def test_predictions(tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("predictions", tmp_path)
    assert ours == theirs


def test_validate_and_test_checkpoints(tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("checkpoint_paths", tmp_path)
    assert ours == theirs


def test_datamodule_state_and_stage_hooks(tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("datamodule_state", tmp_path)
    assert ours == theirs


def test_on_exception(tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("on_exception", tmp_path)
    assert ours == theirs


@pytest.mark.parametrize("limit_val_batches", [1, 0.5])
def test_sanity_check_of_every_batch(limit_val_batches: float, tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("sanity_all", tmp_path, limit_val_batches=limit_val_batches)
    assert ours == theirs


@pytest.mark.parametrize("max_steps,max_epochs", [(10, 5), (5, None)])
def test_repeated_fit_calls(max_steps: int, max_epochs: int | None, tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("repeated_fit", tmp_path, max_steps=max_steps, max_epochs=max_epochs)
    assert ours == theirs


SOURCE_MORE = '''
import torch
from trainer import Callback, Trainer
from trainer.demos.boring_classes import BoringModel

QUIET = dict(enable_progress_bar=False, enable_model_summary=False, logger=False, enable_checkpointing=False)


def metrics_reset(root):
    """Lightning: test_trainer_metrics_reset_before_each_task (what each task starts with)."""
    seen = []

    class Watch(Callback):
        def record(self, trainer, name):
            seen.append((name, sorted(k for k in trainer.callback_metrics if not k.startswith("train/")),
                         sorted(trainer.progress_bar_metrics), sorted(trainer.logged_metrics)))

        def on_train_start(self, trainer, *args):
            self.record(trainer, "train")

        def on_validation_start(self, trainer, *args):
            if not trainer.sanity_checking and trainer.state.fn == "validate":
                self.record(trainer, "validate")

        def on_test_start(self, trainer, *args):
            self.record(trainer, "test")

        def on_predict_start(self, trainer, *args):
            self.record(trainer, "predict")

    class Model(BoringModel):
        def training_step(self, *args, **kwargs):
            self.log("t_metric", 7.0, prog_bar=True)
            return super().training_step(*args, **kwargs)

        def validation_step(self, *args, **kwargs):
            self.log("v_metric", 14.0, prog_bar=True)
            return super().validation_step(*args, **kwargs)

        def test_step(self, *args, **kwargs):
            self.log("test_metric", 21.0)
            return super().test_step(*args, **kwargs)

    torch.manual_seed(0)
    model = Model()
    trainer = Trainer(default_root_dir=root, max_epochs=1, limit_train_batches=2, limit_val_batches=2,
                      limit_test_batches=2, limit_predict_batches=2, callbacks=[Watch()], **QUIET)
    trainer.fit(model)
    trainer.validate(model, verbose=False)
    trainer.test(model, verbose=False)
    trainer.predict(model)
    return seen


def disabled_validation(root, fast_dev_run):
    """Lightning: test_disabled_validation."""
    calls = []

    class Model(BoringModel):
        def validation_step(self, *args, **kwargs):
            calls.append(self.trainer.sanity_checking)
            return super().validation_step(*args, **kwargs)

    torch.manual_seed(0)
    trainer = Trainer(default_root_dir=root, max_epochs=2, limit_train_batches=0.1, limit_val_batches=0.0,
                      fast_dev_run=fast_dev_run, **QUIET)
    trainer.fit(Model())
    return {"calls": calls, "current_epoch": trainer.current_epoch, "global_step": trainer.global_step}
'''

SOURCE_MORE += '''

def stateful_ckpt_path(root):
    """Lightning: test_stateful_trainer_ckpt_path_support (NeMo's pattern: `trainer.ckpt_path = path`)."""
    import warnings
    from pathlib import Path

    torch.manual_seed(0)
    first = BoringModel()
    trainer = Trainer(default_root_dir=root, max_steps=2, limit_val_batches=1, **QUIET)
    trainer.fit(first)
    path = Path(root) / "two.ckpt"
    trainer.save_checkpoint(path)
    out = {}
    model = BoringModel()
    trainer = Trainer(default_root_dir=root, max_steps=3, limit_val_batches=1, limit_test_batches=1, **QUIET)
    trainer.ckpt_path = path
    out["set"] = Path(trainer.ckpt_path).name
    trainer.fit(model)  # resumes from the file set on the Trainer
    out["resumed"] = (trainer.global_step, Path(trainer.ckpt_path).name)
    test_model = BoringModel()
    trainer.test(test_model, verbose=False)  # the set file's weights, not the module's
    out["tested_weights_are_the_files"] = all(torch.equal(a, b) for a, b in zip(
        test_model.state_dict().values(), first.state_dict().values()))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.validate(BoringModel(), ckpt_path=path, verbose=False)
    out["warned"] = any("ckpt_path" in str(w.message) for w in caught)
    plain_model = BoringModel()
    before = [v.clone() for v in plain_model.state_dict().values()]
    trainer.test(plain_model, verbose=False)  # forgotten: the module's own weights
    out["forgotten"] = all(torch.equal(a, b) for a, b in zip(before, plain_model.state_dict().values()))
    trainer.ckpt_path = None
    return out
'''

SPEC_MORE = Spec(SOURCE_MORE, "spec_trainer_api_more")


def test_ckpt_path_set_on_the_trainer(tmp_path: Path) -> None:
    ours, theirs = SPEC_MORE.compare("stateful_ckpt_path", tmp_path)
    assert ours == theirs


def test_metrics_start_empty_in_each_task(tmp_path: Path) -> None:
    ours, theirs = SPEC_MORE.compare("metrics_reset", tmp_path)
    assert ours == theirs


@pytest.mark.parametrize("fast_dev_run", [False, True])
def test_disabled_validation(fast_dev_run: bool, tmp_path: Path) -> None:
    ours, theirs = SPEC_MORE.compare("disabled_validation", tmp_path, fast_dev_run=fast_dev_run)
    assert ours == theirs
