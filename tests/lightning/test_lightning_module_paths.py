"""Lightning's module paths below the top level (`lightning.pytorch.loggers.logger`,
`.profilers`, `.utilities.warnings`, `.plugins.environments`, ...) under `trainer`, and what
the objects found there do: a logger written the Lightning way gets Lightning's calls,
Lightning's profilers map onto `Trainer(profiler=...)`, plugins name the argument to write."""

from __future__ import annotations

import importlib
import signal
import textwrap
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.helpers.lightning_projects import assert_same_weights, load_source

lightning = pytest.importorskip("lightning")

#: Lightning's paths, as real projects import them, with `lightning.pytorch` -> `trainer`
PATHS = {
    "trainer.loggers.logger": ["Logger", "rank_zero_experiment", "DummyLogger"],
    "trainer.loggers.tensorboard": ["TensorBoardLogger"],
    "trainer.loggers.csv_logs": ["CSVLogger"],
    "trainer.loggers.wandb": ["WandbLogger"],
    "trainer.loggers.mlflow": ["MLFlowLogger"],
    "trainer.utilities.warnings": ["PossibleUserWarning"],
    "trainer.profilers": ["Profiler", "SimpleProfiler", "AdvancedProfiler", "PyTorchProfiler", "PassThroughProfiler"],
    "trainer.utilities.model_summary": ["ModelSummary", "summarize", "get_human_readable_count"],
    "trainer.utilities.parsing": ["AttributeDict"],
    "trainer.utilities.memory": ["garbage_collection_cuda", "is_oom_error", "recursive_detach"],
    "trainer.utilities.model_helpers": ["is_overridden"],
    "trainer.utilities.data": ["extract_batch_size", "has_len_all_ranks", "DataLoader"],
    "trainer.core.module": ["LightningModule"],
    "trainer.core.datamodule": ["LightningDataModule"],
    "trainer.core.optimizer": ["LightningOptimizer"],
    "trainer.plugins.environments": ["SLURMEnvironment", "LightningEnvironment", "TorchElasticEnvironment"],
    "trainer.plugins": ["MixedPrecision", "Precision", "AsyncCheckpointIO", "TorchSyncBatchNorm"],
    "trainer.accelerators": ["CPUAccelerator", "CUDAAccelerator", "find_usable_cuda_devices"],
}


@pytest.mark.parametrize("path", sorted(PATHS))
def test_lightnings_module_paths_import_with_their_names(path):
    ours = importlib.import_module(path)
    theirs = importlib.import_module(path.replace("trainer", "lightning.pytorch", 1))
    assert [name for name in PATHS[path] if hasattr(theirs, name) and not hasattr(ours, name)] == []
    assert [name for name in PATHS[path] if not hasattr(ours, name)] == []


def test_each_path_names_the_one_class():
    import trainer
    from trainer.core.datamodule import LightningDataModule
    from trainer.core.module import LightningModule
    from trainer.loggers import CSVLogger, Logger, MLflowLogger, TensorBoardLogger, WandbLogger
    from trainer.loggers.csv_logs import CSVLogger as csv
    from trainer.loggers.logger import Logger as base
    from trainer.loggers.mlflow import MLFlowLogger
    from trainer.loggers.tensorboard import TensorBoardLogger as tb
    from trainer.loggers.wandb import WandbLogger as wandb
    from trainer.utilities.parsing import AttributeDict

    assert (csv, base, MLFlowLogger, tb, wandb) == (CSVLogger, Logger, MLflowLogger, TensorBoardLogger, WandbLogger)
    assert LightningModule is trainer.Module and LightningDataModule is trainer.DataModule
    assert isinstance(trainer.Module().hparams, AttributeDict)
    assert trainer.profilers.SimpleProfiler is importlib.import_module("trainer.profilers").SimpleProfiler  # pl.profilers.X


# ------------------------------------------------------------------ a logger of one's own
PROJECT = '''
import argparse
from pathlib import Path
import torch
from torch.utils.data import DataLoader, TensorDataset
import trainer as L
from callbacks import ModelCheckpoint
from trainer.loggers.logger import Logger, rank_zero_experiment
from trainer.utilities import rank_zero_only


class Recorder(Logger):
    """A logger written the Lightning way: it records what it is given."""

    def __init__(self, save_dir):
        super().__init__()
        self._save_dir = save_dir
        self.calls = []

    @property
    def name(self):
        return "recorder"

    @property
    def version(self):
        return 3

    @property
    def save_dir(self):
        return self._save_dir

    @property
    @rank_zero_experiment
    def experiment(self):
        return self

    @rank_zero_only
    def log_hyperparams(self, params, *args, **kwargs):
        self.calls.append(("hyperparams", dict(vars(params) if isinstance(params, argparse.Namespace) else params)))

    @rank_zero_only
    def log_metrics(self, metrics, step=None):
        self.calls.append(("metrics", {k: float(v) for k, v in metrics.items()}, step))

    @rank_zero_only
    def save(self):
        self.calls.append(("save",))

    @rank_zero_only
    def finalize(self, status):
        self.calls.append(("finalize", status))

    def after_save_checkpoint(self, checkpoint_callback):
        self.calls.append(("checkpoint", Path(checkpoint_callback.best_model_path).name))


class Net(L.LightningModule):
    def __init__(self, lr=0.1, fail_at=None):
        super().__init__()
        self.save_hyperparameters()
        self.layer = torch.nn.Linear(3, 1)

    def training_step(self, batch, batch_idx):
        if self.global_step == self.hparams.fail_at:
            raise RuntimeError("stop here")
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.log("train_loss", loss, on_step=True, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.layer(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


def main(root, fail_at=None):
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(16, 3), torch.randn(16, 1))
    model = Net(fail_at=fail_at)
    logger = Recorder(str(root))
    trainer = L.Trainer(max_epochs=2, logger=logger, log_every_n_steps=2, enable_progress_bar=False,
                        enable_model_summary=False, default_root_dir=str(root),
                        callbacks=[ModelCheckpoint(monitor="val_loss", filename="best-{epoch}")])
    try:
        trainer.fit(model, DataLoader(data, batch_size=4), DataLoader(data, batch_size=8))
    except RuntimeError:
        return {"logger": logger}
    fit_calls = len(logger.calls)
    trainer.validate(model, DataLoader(data, batch_size=8))
    return {"model": model, "trainer": trainer, "logger": logger, "fit_calls": fit_calls}


def fit_twice(root):
    torch.manual_seed(0)
    logger = Recorder(str(root))
    trainer = L.Trainer(max_epochs=1, logger=logger, enable_progress_bar=False, enable_model_summary=False,
                        enable_checkpointing=False, default_root_dir=str(root))
    data = DataLoader(TensorDataset(torch.randn(8, 3), torch.randn(8, 1)), batch_size=4)
    trainer.fit(Net(lr=0.2), data)
    trainer.fit(Net(lr=0.3), data)
    return [c for c in logger.calls if c[0] in ("hyperparams", "finalize")]
'''


def _user_metrics(call: tuple[Any, ...]) -> tuple[Any, ...]:
    """A metrics call without the Trainer's own `train/...` scalars (written beside the user's here)."""
    if call[0] != "metrics":
        return call
    return ("metrics", {k: round(v, 6) for k, v in call[1].items() if not k.startswith("train/")}, call[2])


def _as_lightning_steps(calls: list[tuple[Any, ...]], fit_calls: int) -> list[tuple[Any, ...]]:
    """Our calls with the step Lightning writes: during fit, the step's 0-based index
    (`global_step - 1`, docs/lightning.md); after it, `global_step` in both."""
    return [("metrics", c[1], c[2] - 1) if c[0] == "metrics" and i < fit_calls else c for i, c in enumerate(calls)]


def test_a_logger_subclassing_Logger_gets_lightnings_calls(tmp_path):
    ours = load_source(textwrap.dedent(PROJECT), "ours", "recorder").main(tmp_path / "ours")
    theirs = load_source(textwrap.dedent(PROJECT), "lightning", "recorder").main(tmp_path / "lightning")
    assert_same_weights(ours["model"], theirs["model"])
    mine = _as_lightning_steps([_user_metrics(c) for c in ours["logger"].calls], ours["fit_calls"])
    expected = [_user_metrics(c) for c in theirs["logger"].calls]
    assert ("finalize", "success") in expected and ("hyperparams", {"lr": 0.1, "fail_at": None}) in expected
    saved = [c for c in expected if c[0] == "checkpoint"]
    assert saved and [c for c in mine if c[0] == "checkpoint"] == saved  # after_save_checkpoint, with the file's name
    # (here a checkpoint is written once the epoch's values are logged; Lightning writes it between the two)
    mine, expected = [c for c in mine if c[0] != "checkpoint"], [c for c in expected if c[0] != "checkpoint"]
    assert mine == expected  # hyperparameters, a save() after every write, the metrics, finalize: the same calls
    # the run's folder is save_dir/name/version_N, where Lightning puts the run's checkpoints/
    assert (tmp_path / "ours" / "recorder" / "version_3" / "last.ckpt").is_file()
    assert (tmp_path / "lightning" / "recorder" / "version_3" / "checkpoints").is_dir()


DICT_LOGGER = '''
import collections
import torch
from torch.utils.data import DataLoader, TensorDataset
import trainer as L
from trainer.loggers.logger import Logger
from trainer.utilities import rank_zero_only


class DictLogger(Logger):
    """A real project's logger (metrics kept in a dict), as written for Lightning."""

    def __init__(self):
        super(DictLogger).__init__()
        self.logged_metrics = collections.defaultdict(list)

    @property
    def name(self):
        return "DictLogger"

    @property
    def version(self):
        return "0.1"

    @rank_zero_only
    def log_hyperparams(self, params):
        pass

    @rank_zero_only
    def log_metrics(self, metrics, step):
        for key, val in metrics.items():
            self.logged_metrics[key].append(val)

    @rank_zero_only
    def save(self):
        pass

    @rank_zero_only
    def finalize(self, status):
        pass


class Net(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(3, 1)

    def training_step(self, batch, batch_idx):
        loss = torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1])
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1]))

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=0.01)


def main(root):
    torch.manual_seed(0)
    data = DataLoader(TensorDataset(torch.randn(32, 3), torch.randn(32, 1)), batch_size=4)
    logger = DictLogger()
    L.Trainer(max_epochs=3, logger=logger, log_every_n_steps=4, enable_progress_bar=False, enable_model_summary=False,
              enable_checkpointing=False, default_root_dir=str(root)).fit(Net(), data, data)
    return {key: [float(v) for v in values] for key, values in logger.logged_metrics.items()}
'''


def test_a_real_projects_dict_logger_holds_lightnings_values(tmp_path):
    ours = load_source(DICT_LOGGER, "ours", "dict_logger").main(tmp_path / "ours")
    theirs = load_source(DICT_LOGGER, "lightning", "dict_logger").main(tmp_path / "lightning")
    assert set(theirs) == {"train_loss", "val_loss", "epoch"}
    assert {key: ours[key] for key in theirs} == theirs


def test_each_fit_gives_a_logger_of_ones_own_the_hyperparameters_as_lightning(tmp_path):
    ours = load_source(textwrap.dedent(PROJECT), "ours", "recorder").fit_twice(tmp_path / "ours")
    theirs = load_source(textwrap.dedent(PROJECT), "lightning", "recorder").fit_twice(tmp_path / "lightning")
    assert [c for c in theirs if c[0] == "hyperparams"] == [("hyperparams", {"lr": 0.2, "fail_at": None}),
                                                           ("hyperparams", {"lr": 0.3, "fail_at": None})]
    assert ours == theirs


def test_a_failed_fit_finalizes_the_logger_as_failed_as_lightning(tmp_path):
    ours = load_source(textwrap.dedent(PROJECT), "ours", "recorder").main(tmp_path / "ours", fail_at=3)
    theirs = load_source(textwrap.dedent(PROJECT), "lightning", "recorder").main(tmp_path / "lightning", fail_at=3)
    assert theirs["logger"].calls[-1] == ("finalize", "failed")
    assert ours["logger"].calls[-1] == ("finalize", "failed")


def test_a_logger_of_ones_own_in_a_list_gets_its_calls_and_the_others_theirs(tmp_path):
    from torch.utils.data import DataLoader

    import trainer
    from trainer.demos.boring_classes import BoringModel, RandomDataset
    from trainer.loggers import CSVLogger

    project = load_source(textwrap.dedent(PROJECT), "ours", "recorder")
    recorder = project.Recorder(str(tmp_path))

    class Net(BoringModel):
        def __init__(self, width=32):
            super().__init__()
            self.save_hyperparameters()

        def training_step(self, batch, batch_idx):
            out = super().training_step(batch, batch_idx)
            self.log("loss", out["loss"])
            return out

    fit = trainer.Trainer(max_epochs=1, limit_train_batches=4, log_every_n_steps=2, enable_progress_bar=False,
                          logger=[CSVLogger(tmp_path), recorder], root_dir=tmp_path)
    fit.fit(Net(), DataLoader(RandomDataset(32, 16), batch_size=4))
    calls = recorder.calls
    assert calls[:2] == [("hyperparams", {"width": 32}), ("save",)] and calls[-1] == ("finalize", "success")
    metrics = [i for i, c in enumerate(calls) if c[0] == "metrics"]
    assert [c[2] for c in calls if c[0] == "metrics"] == [2, 4] and all(calls[i + 1] == ("save",) for i in metrics)
    assert "width" in (Path(fit.log_dir) / "hparams.yaml").read_text()  # the CSV logger still gets the run's own


def test_logger_base_class_is_lightnings(monkeypatch, tmp_path):
    from trainer.loggers.logger import DummyLogger, Logger, rank_zero_experiment
    from trainer.utilities import rank_zero_only

    class Missing(Logger):
        name, version = "x", 0

        def log_hyperparams(self, params, *args, **kwargs): ...

    with pytest.raises(TypeError, match="log_metrics"):  # abstract, as Lightning's
        Missing()
    assert not isinstance("tensorboard", Logger)

    class Duck:  # the logger's methods, its folder set on the instance: a logger, as before
        def __init__(self):
            self.log_dir = "runs"

        def log_metrics(self, metrics, step): ...

        def log_hyperparams(self, params, metrics=None): ...

        def flush(self): ...

        def close(self): ...

    assert isinstance(Duck(), Logger)
    dummy = DummyLogger()
    dummy.log_metrics({"a": 1.0}, 1)
    dummy.anything(1, key=2)
    dummy.experiment.add_scalar("a", 1.0)
    assert dummy[0] is dummy
    assert not hasattr(dummy, "continue_run") and not hasattr(dummy, "__deepcopy__")  # not a run to continue

    import copy

    from trainer import Trainer

    copy.deepcopy(dummy)
    Trainer(logger=DummyLogger(), max_steps=1, enable_progress_bar=False, root_dir=tmp_path).fit(
        _boring(), torch.utils.data.DataLoader(_random(32, 8), batch_size=4))

    class Experiments(Missing):
        def log_metrics(self, metrics, step=None): ...

        @property
        @rank_zero_experiment
        def experiment(self):
            return "the writer"

    assert Experiments().experiment == "the writer"
    monkeypatch.setattr(rank_zero_only, "rank", 1)  # another rank: an object that takes any call
    other = Experiments().experiment
    assert other != "the writer" and other.add_image("x", 1) is other


def _boring() -> Any:
    from trainer.demos.boring_classes import BoringModel

    return BoringModel()


def _random(size: int, length: int) -> Any:
    from trainer.demos.boring_classes import RandomDataset

    return RandomDataset(size, length)


# ------------------------------------------------------------------ warnings
def test_possible_user_warning_is_a_user_warning_to_filter():
    from lightning.pytorch.utilities.warnings import PossibleUserWarning as Theirs

    from trainer.utilities.warnings import PossibleUserWarning

    assert issubclass(PossibleUserWarning, UserWarning) and issubclass(Theirs, UserWarning)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", category=PossibleUserWarning)
        warnings.warn("few workers", PossibleUserWarning)
        warnings.warn("kept", UserWarning)
    assert [str(w.message) for w in caught] == ["kept"]


# ------------------------------------------------------------------ profilers
def _fit(root: Path, profiler: Any) -> Any:
    from torch.utils.data import DataLoader

    from trainer import Trainer
    from trainer.demos.boring_classes import BoringModel, RandomDataset

    trainer = Trainer(max_epochs=1, limit_train_batches=6, limit_val_batches=1, profiler=profiler, logger=False,
                      enable_progress_bar=False, enable_model_summary=False, root_dir=root)
    torch.manual_seed(0)
    trainer.fit(BoringModel(), DataLoader(RandomDataset(32, 24), batch_size=4))
    return trainer


def test_simple_profiler_object_is_the_trainers_and_writes_lightnings_file(tmp_path):
    from lightning.pytorch.profilers import SimpleProfiler as Theirs

    from trainer.profilers import SimpleProfiler

    timer = SimpleProfiler(dirpath=tmp_path / "ours", filename="perf")
    trainer = _fit(tmp_path, timer)
    assert trainer.profiler is timer and timer.calls("run_training_batch") == 6
    written = sorted(p.name for p in (tmp_path / "ours").iterdir())
    from lightning.pytorch import Trainer as LightningTrainer
    from lightning.pytorch.demos.boring_classes import BoringModel, RandomDataset
    from torch.utils.data import DataLoader

    LightningTrainer(max_epochs=1, limit_train_batches=6, limit_val_batches=1, logger=False, enable_progress_bar=False,
                     enable_checkpointing=False, enable_model_summary=False, default_root_dir=tmp_path,
                     profiler=Theirs(dirpath=tmp_path / "lightning", filename="perf")).fit(
        BoringModel(), DataLoader(RandomDataset(32, 24), batch_size=4))
    assert written == sorted(p.name for p in (tmp_path / "lightning").iterdir()) == ["fit-perf.txt"]
    assert "run_training_batch" in (tmp_path / "ours" / "fit-perf.txt").read_text()


def test_pytorch_profiler_maps_onto_the_trainers_settings(tmp_path):
    from trainer import Trainer
    from trainer.profilers import PyTorchProfiler

    profiler = PyTorchProfiler(dirpath=tmp_path / "traces", filename="table", row_limit=5, profile_memory=True,
                               schedule=torch.profiler.schedule(wait=1, warmup=1, active=2))
    assert Trainer(profiler=profiler, logger=False).args.profiler == {
        "row_limit": 5, "record_memory": True, "wait": 1, "warmup": 1, "active": 2, "repeat": 0,
        "dirpath": tmp_path / "traces", "filename": "table"}
    assert Trainer(profiler=PyTorchProfiler(), logger=False).args.profiler == {}  # Lightning's default window
    _fit(tmp_path, PyTorchProfiler(dirpath=tmp_path / "traces", filename="table", schedule=torch.profiler.schedule(
        wait=1, warmup=1, active=2, repeat=1)))
    assert (tmp_path / "traces" / "table.txt").is_file()
    assert any(p.name.endswith(".json") for p in (tmp_path / "traces").iterdir())
    with pytest.raises(ValueError, match=r"PyTorchProfiler\(emit_nvtx=...\) has no meaning here"):
        PyTorchProfiler(emit_nvtx=True)


def test_profilers_the_trainer_does_not_run_say_what_to_use():
    from trainer import Trainer
    from trainer.profilers import AdvancedProfiler, PassThroughProfiler, Profiler

    with pytest.raises(ValueError, match="AdvancedProfiler is Lightning's cProfile report.*SimpleProfiler"):
        AdvancedProfiler(dirpath=".", filename="perf")

    class Mine(Profiler):
        def start(self, action_name): ...

        def stop(self, action_name): ...

    with pytest.raises(ValueError, match=r"Trainer\(profiler=Mine\(...\)\): a Profiler subclass of your own"):
        Trainer(profiler=Mine(), logger=False)
    assert Trainer(profiler=PassThroughProfiler(), logger=False).args.profiler is None


# ------------------------------------------------------------------ utilities
def test_model_summary_counts_as_lightnings():
    from lightning.pytorch.utilities.model_summary import ModelSummary as Theirs
    from lightning.pytorch.utilities.model_summary import get_human_readable_count as their_count

    from lightning.pytorch.demos.boring_classes import BoringModel as TheirModel

    from trainer.demos.boring_classes import BoringModel
    from trainer.utilities.model_summary import ModelSummary, get_human_readable_count

    model, their_model = BoringModel(), TheirModel()
    for each in (model, their_model):
        each.extra = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU())
        each.extra[0].weight.requires_grad_(False)
    for depth in (-1, 0, 1, 2):
        ours, theirs = ModelSummary(model, max_depth=depth), Theirs(their_model, max_depth=depth)
        assert (ours.layer_names, ours.layer_types, ours.param_nums) == (theirs.layer_names, theirs.layer_types, theirs.param_nums)
        assert (ours.total_parameters, ours.trainable_parameters) == (theirs.total_parameters, theirs.trainable_parameters)
        assert ours.model_size == pytest.approx(theirs.model_size)
    assert "extra.0" in str(ModelSummary(model, max_depth=2))
    assert [get_human_readable_count(n) for n in (7, 1234, 2_500_000)] == [their_count(n) for n in (7, 1234, 2_500_000)]


def test_is_overridden_answers_as_lightnings():
    from lightning.pytorch.utilities.model_helpers import is_overridden as theirs

    import trainer
    from trainer.utilities.model_helpers import is_overridden

    def module_class(base: type) -> type:
        class Net(base):
            def validation_step(self, batch, batch_idx): ...

        return Net

    class Stops(trainer.Callback):
        def on_train_epoch_end(self, trainer, module): ...

    ours_net, their_net = module_class(trainer.LightningModule)(), module_class(lightning.pytorch.LightningModule)()
    for hook in ("validation_step", "test_step", "training_step", "no_such_hook"):
        assert is_overridden(hook, ours_net) == theirs(hook, their_net)
    assert is_overridden("on_train_epoch_end", Stops()) and not is_overridden("on_fit_start", Stops())
    assert not is_overridden("setup", trainer.LightningDataModule()) and not is_overridden("x", None)
    with pytest.raises(ValueError, match="parent="):
        is_overridden("forward", torch.nn.Linear(1, 1))


def test_memory_and_data_helpers_answer_as_lightnings():
    from dataclasses import dataclass

    from lightning.pytorch.utilities import data as their_data
    from lightning.pytorch.utilities import memory as their_memory

    from trainer import Trainer
    from trainer.utilities import data, memory

    memory.garbage_collection_cuda()
    errors = [RuntimeError("CUDA out of memory. Tried to allocate"), RuntimeError("other"),
              RuntimeError("DefaultCPUAllocator: can't allocate memory"), ValueError("out of memory")]
    assert [memory.is_oom_error(e) for e in errors] == [their_memory.is_oom_error(e) for e in errors]
    nested = {"a": [torch.ones(2, requires_grad=True)], "b": "text"}
    assert not memory.recursive_detach(nested)["a"][0].requires_grad and memory.recursive_detach(nested)["b"] == "text"

    @dataclass
    class Batch:
        x: torch.Tensor

    for batch in (torch.zeros(5, 2), {"x": torch.zeros(3, 1), "y": [torch.zeros(3)]}, [torch.tensor(1.0)], Batch(torch.zeros(4))):
        assert data.extract_batch_size(batch) == their_data.extract_batch_size(batch)
    with pytest.raises(ValueError, match="batch_size=n"):
        data.extract_batch_size({"text": "no tensor"})
    loader = data.DataLoader(range(10), batch_size=4)
    assert data.has_len_all_ranks(loader, Trainer(logger=False).strategy) is True
    assert data.has_len_all_ranks(iter(range(3)), Trainer(logger=False).strategy) is False


def test_the_optimizers_hooks_receive_are_lightning_optimizers(tmp_path):
    from torch.utils.data import DataLoader

    from trainer import Trainer
    from trainer.core.optimizer import LightningOptimizer
    from trainer.demos.boring_classes import BoringModel, RandomDataset

    seen: list[bool] = []

    class Net(BoringModel):
        def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure=None):
            seen.append(isinstance(optimizer, LightningOptimizer))
            optimizer.step(closure=optimizer_closure)

    class Manual(BoringModel):
        def __init__(self):
            super().__init__()
            self.automatic_optimization = False

        def training_step(self, batch, batch_idx):
            optimizer = self.optimizers()
            seen.append(isinstance(optimizer, LightningOptimizer))
            optimizer.zero_grad()
            self.manual_backward(self.step(batch))
            optimizer.step()

    for model in (Net(), Manual()):
        Trainer(max_steps=1, logger=False, enable_checkpointing=False, enable_progress_bar=False, root_dir=tmp_path).fit(
            model, DataLoader(RandomDataset(32, 8), batch_size=4))
    assert seen and all(seen)
    assert not isinstance(torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1), LightningOptimizer)


# ------------------------------------------------------------------ plugins and accelerators
def test_plugins_name_the_argument_to_write_before_any_work():
    from trainer import Trainer
    from trainer.plugins import AsyncCheckpointIO, MixedPrecision, TorchSyncBatchNorm
    from trainer.plugins.environments import SLURMEnvironment

    Trainer(plugins=None, logger=False)  # Lightning's default
    Trainer(plugins=[], logger=False)
    cases = [
        ([SLURMEnvironment(auto_requeue=False)], r"Trainer\(requeue=False\)"),
        ([SLURMEnvironment(requeue_signal=signal.SIGHUP)], r"Trainer\(requeue_signal='SIGHUP'\)"),
        (MixedPrecision("bf16-mixed", "cuda"), r"Trainer\(precision='bf16-mixed'\)"),
        ([AsyncCheckpointIO()], r"Trainer\(async_checkpointing=True\)"),
        ([TorchSyncBatchNorm()], r"Trainer\(sync_batchnorm=True\)"),
    ]
    for plugins, message in cases:
        with pytest.raises(ValueError, match=r"takes no plugins. Write instead: " + message):
            Trainer(plugins=plugins, logger=False)


def test_slurm_environment_reads_slurms_variables_as_lightnings(monkeypatch):
    from lightning.pytorch.plugins.environments import SLURMEnvironment as Theirs

    from trainer.plugins.environments import SLURMEnvironment

    for name, value in {"SLURM_NTASKS": "4", "SLURM_PROCID": "3", "SLURM_LOCALID": "1", "SLURM_NODEID": "1",
                        "SLURM_JOB_ID": "1234", "SLURM_JOB_NAME": "train",
                        "SLURM_NTASKS_PER_NODE": "2"}.items():
        monkeypatch.setenv(name, value)
    ours, theirs = SLURMEnvironment(), Theirs()
    assert SLURMEnvironment.detect() == Theirs.detect() is True
    assert [ours.world_size(), ours.global_rank(), ours.local_rank(), ours.node_rank(), ours.job_id()] == \
        [theirs.world_size(), theirs.global_rank(), theirs.local_rank(), theirs.node_rank(), theirs.job_id()]


def test_accelerator_objects_are_their_device_names():
    from trainer import Trainer
    from trainer.accelerators import CPUAccelerator, find_usable_cuda_devices

    assert Trainer(accelerator=CPUAccelerator(), logger=False).args.device == "cpu"
    assert find_usable_cuda_devices(0) == []
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            find_usable_cuda_devices(1)
