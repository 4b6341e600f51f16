"""`self.log` in evaluation as Lightning's own tests specify it (tests_pytorch/trainer/logging_/
test_eval_loop_logging.py, test_logger_connector.py), each scenario run under Lightning and
here, with only the imports changed, and compared: the names several loaders give a metric
(`/dataloader_idx_N`, `add_dataloader_idx=False`), what `validate`/`test` return and what
`callback_metrics`/`logged_metrics`/`progress_bar_metrics` hold and with which types, the epoch
reductions (mean weighted by batch size, `reduce_fx`, `sync_dist` on one process).
The Trainer's own names (`train/...`, the bar's `loss`) are left out: a documented difference.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.lightning_spec import Spec

pytest.importorskip("lightning")

SOURCE = '''
import torch
from torch.utils.data import DataLoader
from trainer import Trainer
from trainer.demos.boring_classes import BoringModel, RandomDataset

QUIET = dict(enable_progress_bar=False, enable_model_summary=False)


def value(v):
    return round(float(v), 5)


def own(metrics, drop=()):
    """The metrics the module logged (the Trainer's own `train/...` names and the bar's `loss`
    left out, and the names in `drop`), with their values."""
    return {k: value(v) for k, v in sorted(metrics.items())
            if not k.startswith("train/") and k != "loss" and k not in drop}


def results_of(results):
    if isinstance(results, dict):  # one loader: the dict itself here, which answers [0]
        results = [results[0]]
    return [{k: value(v) for k, v in sorted(r.items())} for r in results]


def metrics(trainer, eval_step_names=()):
    """`eval_step_names`: values logged with on_step=True in an evaluation step, which Lightning
    writes to its loggers per evaluation batch (`logged_metrics`) and this package does not (a
    documented difference); `callback_metrics` holds none of them in either."""
    bar = trainer.progress_bar_metrics
    assert all(type(v) is float for v in bar.values())
    return {"callback": own(trainer.callback_metrics), "logged": own(trainer.logged_metrics, eval_step_names),
            "bar": own(bar)}


def step_and_epoch_names(root):
    """Lightning: test__validation_step__log, test__validation_step__epoch_end__log, test_eval_float_logging."""

    class TestModel(BoringModel):
        def training_step(self, batch, batch_idx):
            out = super().training_step(batch, batch_idx)
            self.log("a", out["loss"], on_step=True, on_epoch=True)
            self.log("a2", 2)
            self.log("t", out["loss"])
            return out

        def validation_step(self, batch, batch_idx):
            out = super().validation_step(batch, batch_idx)
            self.log("b", out["x"], on_step=True, on_epoch=True)
            self.log("c", out["x"])
            self.log("f", 12.0)
            return out

        def on_validation_epoch_end(self):
            self.log("g", torch.tensor(2, device=self.device), on_epoch=True)

    torch.manual_seed(0)
    trainer = Trainer(default_root_dir=root, limit_train_batches=2, limit_val_batches=2, max_epochs=2,
                      log_every_n_steps=1, enable_checkpointing=False, **QUIET)
    trainer.fit(TestModel())
    return metrics(trainer, {"b_step"})


def epoch_end_only(root):
    """Lightning: test_eval_epoch_logging, test_eval_epoch_only_logging."""

    class TestModel(BoringModel):
        def on_validation_epoch_end(self):
            self.log("c", torch.tensor(2), on_epoch=True, prog_bar=True, logger=True)
            self.log("d/e/f", 2)

        def on_test_epoch_end(self):
            self.log("c", torch.tensor(2))
            self.log("d/e/f", 2)

    torch.manual_seed(0)
    model = TestModel()
    trainer = Trainer(default_root_dir=root, limit_train_batches=2, limit_val_batches=2, limit_test_batches=2,
                      max_epochs=1, log_every_n_steps=1, enable_checkpointing=False, **QUIET)
    trainer.fit(model)
    out = {"fit": metrics(trainer)}
    out["test"] = results_of(trainer.test(model, verbose=False))
    out["test_metrics"] = metrics(trainer)
    return out


def auto_reduce(root):
    """Lightning: test_eval_logging_auto_reduce (the epoch value is the steps' mean)."""
    losses = []

    class TestModel(BoringModel):
        def validation_step(self, batch, batch_idx):
            loss = self.step(batch)
            losses.append(loss)
            self.log("val_loss", loss, on_epoch=True, on_step=True, prog_bar=True)
            return {"x": loss}

        def val_dataloader(self):  # batches of 3, 3 and 2: a mean weighted by batch size
            return DataLoader(RandomDataset(32, 8), batch_size=3)

    torch.manual_seed(0)
    trainer = Trainer(default_root_dir=root, limit_train_batches=3, max_epochs=1, log_every_n_steps=1,
                      num_sanity_val_steps=1, enable_checkpointing=False, **QUIET)
    trainer.fit(TestModel())
    del losses[:1]  # the sanity check's
    return {"metrics": metrics(trainer, {"val_loss_step"}), "mean": value(torch.stack(losses).mean()),
            "weighted": value((torch.stack(losses) * torch.tensor([3.0, 3.0, 2.0])).sum() / 8)}


def dataloader_suffixes(root, several):
    """Lightning: test_multi_dataloaders_add_suffix_properly, test_logging_results_with_no_dataloader_idx,
    test_logging_multi_dataloader_on_epoch_end."""
    outputs = [[], []]

    class TestModel(BoringModel):
        def test_step(self, batch, batch_idx, dataloader_idx=0):
            out = super().test_step(batch, batch_idx)
            self.log("test_loss", out["y"], on_step=True, on_epoch=True)
            self.log_dict({"common": 789})
            self.log("diff", dataloader_idx + 1)
            self.log(f"no_idx_{dataloader_idx}", 321 * (dataloader_idx + 1), add_dataloader_idx=False)
            self.log_dict({"a_class": 123} if dataloader_idx == 0 else {"b_class": 456}, add_dataloader_idx=False)
            outputs[dataloader_idx].append(dataloader_idx + 1)
            return out

        def on_test_epoch_end(self):
            self.log("foobar", sum(sum(o) for o in outputs))

        def test_dataloader(self):
            if several:
                return [DataLoader(RandomDataset(32, 6), batch_size=2), DataLoader(RandomDataset(32, 4))]
            return DataLoader(RandomDataset(32, 6), batch_size=2)

    torch.manual_seed(0)
    trainer = Trainer(default_root_dir=root, limit_test_batches=2, log_every_n_steps=1, **QUIET)
    results = trainer.test(TestModel(), verbose=False)
    steps = {f"test_loss_step{suffix}" for suffix in ("", "/dataloader_idx_0", "/dataloader_idx_1")}
    return {"results": results_of(results), "metrics": metrics(trainer, steps)}


def add_dataloader_idx_in_fit(root, add_dataloader_idx):
    """Lightning: test_auto_add_dataloader_idx."""

    class TestModel(BoringModel):
        def val_dataloader(self):
            dl = super().val_dataloader()
            return [dl, dl]

        def validation_step(self, *args, **kwargs):
            output = super().validation_step(*args[:-1], **kwargs)
            name = "val_loss" if add_dataloader_idx else f"val_loss_custom_naming_{args[-1]}"
            self.log(name, output["x"], add_dataloader_idx=add_dataloader_idx)
            return output

    torch.manual_seed(0)
    trainer = Trainer(default_root_dir=root, limit_train_batches=2, limit_val_batches=2, max_epochs=1,
                      enable_checkpointing=False, **QUIET)
    trainer.fit(TestModel())
    return metrics(trainer)


def several_loaders_reset(root, val_check_interval):
    """Lightning: test_multiple_dataloaders_reset (epoch means per loader, every validation anew)."""
    seen = []

    class TestModel(BoringModel):
        def training_step(self, batch, batch_idx):
            out = super().training_step(batch, batch_idx)
            v = (1 + batch_idx) * (10 if self.current_epoch else 1)
            self.log("batch_idx", v, on_step=True, on_epoch=True, prog_bar=True)
            return out

        def on_train_epoch_end(self):
            seen.append(("train_end", own(self.trainer.progress_bar_metrics)))

        def validation_step(self, batch, batch_idx, dataloader_idx):
            v = (1 + batch_idx) * (1 + dataloader_idx) * (10 if self.current_epoch else 1)
            self.log("val_loss", v, on_step=False, on_epoch=True, prog_bar=True, logger=True)

        def on_validation_epoch_end(self):
            seen.append(("val_end", own(self.trainer.callback_metrics)))

        def val_dataloader(self):
            return [super().val_dataloader(), super().val_dataloader()]

    torch.manual_seed(0)
    trainer = Trainer(default_root_dir=root, limit_train_batches=4, limit_val_batches=3, num_sanity_val_steps=0,
                      val_check_interval=val_check_interval, max_epochs=2, log_every_n_steps=1,
                      enable_checkpointing=False, **QUIET)
    trainer.fit(TestModel())
    return {"seen": seen, "metrics": metrics(trainer)}


def reductions(root):
    """reduce_fx and sync_dist=True on one process, in validation_step with two loaders."""

    class TestModel(BoringModel):
        def validation_step(self, batch, batch_idx, dataloader_idx=0):
            out = super().validation_step(batch, batch_idx)
            v = float(batch_idx + 1) * (dataloader_idx + 1)
            self.log("max", v, reduce_fx="max")
            self.log("min", v, reduce_fx=torch.min)
            self.log("sum", v, reduce_fx="sum", sync_dist=True)
            self.log("mean_sync", out["x"], sync_dist=True, prog_bar=True)
            self.log_dict({"d1": v, "d2": 2 * v}, on_step=True, on_epoch=True, reduce_fx="max")
            return out

        def val_dataloader(self):
            return [DataLoader(RandomDataset(32, 6), batch_size=2), DataLoader(RandomDataset(32, 4), batch_size=2)]

    torch.manual_seed(0)
    model = TestModel()
    trainer = Trainer(default_root_dir=root, limit_train_batches=2, max_epochs=1, log_every_n_steps=1,
                      enable_checkpointing=False, **QUIET)
    trainer.fit(model)
    steps = {f"{name}_step/dataloader_idx_{i}" for name in ("d1", "d2") for i in (0, 1)}
    out = {"fit": metrics(trainer, steps)}
    out["validate"] = results_of(trainer.validate(model, verbose=False))
    out["validate_metrics"] = metrics(trainer, steps)
    return out


def epoch_logged_by_hand(root):
    """Lightning: test_logged_metrics_has_logged_epoch_value (a value logged as `epoch` is kept)."""

    class TestModel(BoringModel):
        def training_step(self, batch, batch_idx):
            self.log("epoch", -batch_idx, logger=True)
            return super().training_step(batch, batch_idx)

    trainer = Trainer(default_root_dir=root, limit_train_batches=2, limit_val_batches=0, max_epochs=1,
                      enable_checkpointing=False, **QUIET)
    trainer.fit(TestModel())
    return own(trainer.logged_metrics)
'''

SPEC = Spec(SOURCE, "spec_eval_logging")


def test_step_and_epoch_names(tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("step_and_epoch_names", tmp_path)
    assert ours == theirs


def test_logged_at_epoch_end_only(tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("epoch_end_only", tmp_path)
    assert ours == theirs


def test_epoch_value_is_the_weighted_mean(tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("auto_reduce", tmp_path)
    assert ours == theirs


@pytest.mark.parametrize("several", [False, True])
def test_dataloader_idx_suffixes(several: bool, tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("dataloader_suffixes", tmp_path, several=several)
    assert ours == theirs


@pytest.mark.parametrize("add_dataloader_idx", [False, True])
def test_add_dataloader_idx_during_fit(add_dataloader_idx: bool, tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("add_dataloader_idx_in_fit", tmp_path, add_dataloader_idx=add_dataloader_idx)
    assert ours == theirs


@pytest.mark.parametrize("val_check_interval", [0.5, 1.0])
def test_several_loaders_start_each_validation_anew(val_check_interval: float, tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("several_loaders_reset", tmp_path, val_check_interval=val_check_interval)
    assert ours == theirs


def test_reductions_and_sync_dist(tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("reductions", tmp_path)
    assert ours == theirs


def test_a_value_logged_as_epoch(tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("epoch_logged_by_hand", tmp_path)
    assert ours == theirs
