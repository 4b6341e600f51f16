"""Lightning's module paths below the top level (`lightning.pytorch.loggers.logger`,
`.profilers`, `.utilities.warnings`, `.plugins.environments`, ...) under `trainer`, and what
the objects found there do: Lightning's profilers map onto `Trainer(profiler=...)`, plugins
name the argument to write, the utilities answer as Lightning's. A logger written the Lightning
way: test_lightning_logger_subclass.py."""

from __future__ import annotations

import importlib
import signal
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

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
