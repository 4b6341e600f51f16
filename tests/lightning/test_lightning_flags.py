"""Lightning's Trainer flags, taken with Lightning's meaning. Each test names the Lightning test
(in Lightning's tests/tests_pytorch) whose expectation it states, then checks ours."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, RandomSampler, SequentialSampler

import callbacks
import trainer as L
from trainer import Trainer

QUIET = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)


class Boring(L.LightningModule):
    """Lightning's BoringModel, with its loaders on the module."""

    def __init__(self, n: int = 16) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 2)
        self.n = n

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self(batch).sum()

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val_loss", self(batch).sum())

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self.log("test_loss", self(batch).sum())

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(torch.arange(self.n * 4, dtype=torch.float32).view(self.n, 4), batch_size=2)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(torch.ones(8, 4), batch_size=2)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(torch.ones(8, 4), batch_size=2)

    def predict_dataloader(self) -> DataLoader:
        return DataLoader(torch.ones(8, 4), batch_size=2)


class Probe(L.Callback):
    """Records a torch switch while training runs."""

    def __init__(self, read: Any) -> None:
        self.read = read
        self.seen: list[Any] = []

    def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, batch_idx: int) -> None:
        self.seen.append(self.read())


def fit_with(tmp_path: Path, read: Any, **flags: Any) -> list[Any]:
    probe = Probe(read)
    Trainer(max_steps=1, callbacks=[probe], root_dir=tmp_path, num_sanity_val_steps=0, **{**QUIET, **flags}).fit(Boring())
    return probe.seen


# ---------------------------------------------------------------------------------- summary
def test_enable_model_summary_logs_the_table_when_fit_starts(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Lightning: callbacks/test_model_summary.py::test_model_summary_callback_present_trainer (on by default)
    and ::test_model_summary_callback_with_enable_model_summary_false (off)."""
    quiet = {k: v for k, v in QUIET.items() if k != "enable_model_summary"}
    with caplog.at_level(logging.INFO, logger="trainer"):
        Trainer(max_steps=1, root_dir=tmp_path, **quiet).fit(Boring())
    assert "| Name  | Type   | Params | Mode" in caplog.text and "Trainable params" in caplog.text
    assert "Total estimated model params size (MB)" in caplog.text and "0 | layer | Linear | 10     | train" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="trainer"):
        Trainer(max_steps=1, root_dir=tmp_path, enable_model_summary=False, **{**quiet}).fit(Boring())
    assert "Trainable params" not in caplog.text
    caplog.clear()
    summary = callbacks.ModelSummary(max_depth=-1)  # replaces the default table: one table only
    with caplog.at_level(logging.INFO, logger="trainer"):
        Trainer(max_steps=1, root_dir=tmp_path, callbacks=[summary], **quiet).fit(Boring())
    assert caplog.text.count("Trainable params") == 1 and summary.summary is not None
    assert L.Trainer().args.enable_model_summary is True  # Lightning's default


# ------------------------------------------------------------------------ torch's switches
@pytest.mark.parametrize(("deterministic", "expected"), [(None, (False, False)), (True, (True, False)), ("warn", (True, True))])
def test_deterministic(tmp_path: Path, deterministic: Any, expected: tuple[bool, bool]) -> None:
    """Lightning: trainer/connectors/test_accelerator_connector.py::test_deterministic_init
    (True: use_deterministic_algorithms(True); "warn": warn_only=True; None: not called).
    Here the switch holds while the Trainer runs and is restored after."""
    def read() -> tuple[bool, bool]:
        return torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()

    assert fit_with(tmp_path, read, deterministic=deterministic) == [expected]
    assert read() == (False, False)


@pytest.mark.parametrize(("benchmark_", "deterministic", "expected"), [
    (None, False, "unchanged"), (None, True, False), (None, None, "unchanged"), (True, None, True), (False, None, False),
])
def test_benchmark(tmp_path: Path, benchmark_: Any, deterministic: Any, expected: Any) -> None:
    """Lightning: trainer/connectors/test_accelerator_connector.py::test_benchmark_option
    (None keeps cudnn.benchmark unless deterministic=True, which turns it off)."""
    before = torch.backends.cudnn.benchmark
    try:
        for start in (False, True):
            torch.backends.cudnn.benchmark = start
            seen = fit_with(tmp_path, lambda: torch.backends.cudnn.benchmark, benchmark=benchmark_, deterministic=deterministic)
            assert seen == [start if expected == "unchanged" else expected]
            assert torch.backends.cudnn.benchmark is start  # restored
    finally:
        torch.backends.cudnn.benchmark = before


def test_deterministic_sets_the_cublas_workspace_at_construction(monkeypatch: pytest.MonkeyPatch,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    """cuBLAS reads CUBLAS_WORKSPACE_CONFIG once, at the process's first CUDA matmul: set when the
    Trainer is built (as Lightning does), not when fit starts; said when CUDA already ran."""
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", "")  # the process's own value comes back after the test
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG")
    Trainer(deterministic=None, logger=False)
    assert "CUBLAS_WORKSPACE_CONFIG" not in os.environ
    Trainer(deterministic=True, logger=False)
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8")  # the user's own value stays
    Trainer(deterministic="warn", logger=False)
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":16:8"
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)  # a forward on the GPU before the Trainer
    with caplog.at_level("WARNING", logger="trainer"):
        Trainer(deterministic=True, logger=False, device="cpu")
    assert "CUBLAS_WORKSPACE_CONFIG=:4096:8 in the environment before the process starts" in caplog.text


def test_benchmark_with_deterministic_warns() -> None:
    """Lightning: test_benchmark_option (its warning for benchmark=True with deterministic=True)."""
    with pytest.warns(UserWarning, match="You passed `deterministic=True` and `benchmark=True`"):
        Trainer(benchmark=True, deterministic=True, logger=False)


def test_detect_anomaly_names_the_op_that_made_a_nan(tmp_path: Path) -> None:
    """Lightning: trainer/test_trainer.py::test_detect_anomaly_nan (RuntimeError 'returned nan values
    in its 0th output')."""
    class NanModel(Boring):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return super().training_step(batch, batch_idx) * torch.tensor(float("nan"))

    with pytest.raises(RuntimeError, match=r"returned nan values in its 0th output"), pytest.warns(UserWarning):
        Trainer(detect_anomaly=True, max_steps=1, root_dir=tmp_path, **QUIET).fit(NanModel())
    assert not torch.is_anomaly_enabled()  # restored
    assert fit_with(tmp_path, torch.is_anomaly_enabled, detect_anomaly=True) == [True]
    assert fit_with(tmp_path, torch.is_anomaly_enabled) == [False]


def test_sync_batchnorm_converts_under_several_processes_only(tmp_path: Path) -> None:
    """Lightning: trainer/connectors/test_accelerator_connector.py::test_sync_batchnorm_set (sync_batchnorm=True
    under DDP applies TorchSyncBatchNorm: BatchNorm layers become SyncBatchNorm)."""
    from trainer.core.flags import sync_batchnorm

    class WithNorm(Boring):
        def __init__(self) -> None:
            super().__init__()
            self.norm = torch.nn.BatchNorm1d(2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.norm(self.layer(x))

    model = WithNorm()
    weight = model.norm.weight
    sync_batchnorm(model, world_size=2)
    assert type(model.norm) is torch.nn.SyncBatchNorm and model.norm.weight is weight  # the same parameters
    one = WithNorm()
    Trainer(sync_batchnorm=True, max_steps=1, root_dir=tmp_path, **QUIET).fit(one)  # one process: nothing to sync
    assert type(one.norm) is torch.nn.BatchNorm1d


@pytest.mark.parametrize("stage", ["validate", "test", "predict"])
def test_inference_mode(stage: str) -> None:
    """Lightning: trainer/flags/test_inference_mode.py::test_eval_inference_mode (True: evaluation under
    torch.inference_mode; False: no_grad without inference mode)."""
    seen: list[tuple[bool, bool]] = []

    class Recorder(Boring):
        def record(self) -> None:
            seen.append((torch.is_grad_enabled(), torch.is_inference_mode_enabled()))

        on_validation_start = on_test_start = on_predict_start = record

    getattr(Trainer(inference_mode=False, fast_dev_run=True, enable_progress_bar=False), stage)(Recorder())
    getattr(Trainer(inference_mode=True, fast_dev_run=True, enable_progress_bar=False), stage)(Recorder())
    assert seen == [(False, False), (False, True)]
    assert Trainer(logger=False).args.inference_mode is True  # Lightning's default


def test_use_distributed_sampler_false_leaves_loaders_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Lightning: trainer/connectors/test_data_connector.py::test_replace_distributed_sampler (the sampler is
    replaced only with use_distributed_sampler=True)."""
    for flag, expected in ((True, 2), (False, 0)):  # the train and the val loader
        trainer = Trainer(use_distributed_sampler=flag, max_steps=1, root_dir=tmp_path, num_sanity_val_steps=0, **QUIET)
        calls: list[Any] = []
        monkeypatch.setattr(trainer.strategy, "setup_loader", lambda loader, train: calls.append(loader) or loader)
        trainer.fit(Boring())
        assert len(calls) == expected


# ------------------------------------------------------------------------------- profiler
def test_profiler_simple_reports_hooks_and_steps(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Lightning: profilers/test_profiler.py::test_simple_profiler_durations (the time of every action,
    `trainer.profiler.summary()`)."""
    class Hooked(Boring):
        def on_train_epoch_start(self) -> None:
            pass

    with caplog.at_level(logging.INFO, logger="trainer"):
        trainer = Trainer(profiler="simple", max_epochs=1, limit_train_batches=3, root_dir=tmp_path, **QUIET)
        trainer.fit(Hooked())
    report = trainer.profiler.summary()
    assert "run_training_batch" in report and "[Module]Hooked.on_train_epoch_start" in report
    assert "[Module]Hooked.validation_step" in report and "Mean duration (s)" in caplog.text
    assert trainer.profiler.calls("run_training_batch") == 3


def test_profiler_pytorch_and_advanced() -> None:
    """Lightning accepts "simple", "advanced", "pytorch": "pytorch" is our torch.profiler session,
    "advanced" (cProfile) is refused with what is offered, without pydantic's wording."""
    from trainer.logging.profiler import StepProfiler

    assert isinstance(StepProfiler.from_arg(Trainer(profiler="pytorch", logger=False).args.profiler), StepProfiler)
    with pytest.raises(ValueError) as caught:
        Trainer(profiler="advanced")
    text = str(caught.value)
    assert "'simple'" in text and "'pytorch'" in text and "pydantic" not in text and "Value error" not in text
    assert Trainer(logger=False).profiler is None


# ------------------------------------------------------------------------------- the data
def test_overfit_batches_unshuffled_train_and_val(tmp_path: Path) -> None:
    """Lightning: trainer/flags/test_overfit_batches.py::test_overfit_batch_limits_train (n batches, the
    unshuffled loader's first batch) and ::test_overfit_batches_raises_warning_in_case_of_sequential_sampler
    (shuffling is turned off with a warning, train and val)."""
    data = torch.arange(40, dtype=torch.float32).view(10, 4)
    seen: dict[str, list[torch.Tensor]] = {"train": [], "val": []}

    class Overfit(Boring):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            seen["train"].append(batch.clone())
            return super().training_step(batch, batch_idx)

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            seen["val"].append(batch.clone())

        def train_dataloader(self) -> DataLoader:
            return DataLoader(data, batch_size=2, shuffle=True)

        def val_dataloader(self) -> DataLoader:
            return DataLoader(data + 100, batch_size=2, shuffle=True)

    trainer = Trainer(overfit_batches=2, max_epochs=2, root_dir=tmp_path, num_sanity_val_steps=0, **QUIET)
    with pytest.warns(UserWarning, match="requested to overfit but enabled train dataloader shuffling"):
        trainer.fit(Overfit())
    assert trainer.num_training_batches == 2
    assert all(torch.equal(b, data[i % 2 * 2: i % 2 * 2 + 2]) for i, b in enumerate(seen["train"])) and len(seen["train"]) == 4
    assert len(seen["val"]) == 4 and torch.equal(seen["val"][0], data[:2] + 100)  # the val loader's first 2, in order
    assert isinstance(trainer._run.train_loader.sampler, SequentialSampler)
    fraction = Trainer(overfit_batches=0.25, max_epochs=1, root_dir=tmp_path, num_sanity_val_steps=0, **QUIET)
    fraction.fit(Boring(n=16))  # 8 batches, a quarter of them
    assert fraction.num_training_batches == 2 and isinstance(Boring().train_dataloader().sampler, SequentialSampler)
    assert not isinstance(DataLoader(data, shuffle=True).sampler, SequentialSampler)
    assert isinstance(DataLoader(data, shuffle=True).sampler, RandomSampler)


def test_reload_dataloaders_every_n_epochs(tmp_path: Path) -> None:
    """Lightning: core/test_datamodules.py::test_dm_reload_dataloaders_every_n_epochs (max_epochs=3, n=2:
    train_dataloader() at epochs 0 and 2, never twice for one epoch)."""
    class Data(L.LightningDataModule):
        def __init__(self) -> None:
            super().__init__()
            self.epochs: list[int] = []

        def train_dataloader(self) -> DataLoader:
            assert self.trainer.current_epoch not in self.epochs
            self.epochs.append(self.trainer.current_epoch)
            return DataLoader(torch.full((4, 4), float(len(self.epochs))), batch_size=2)

    data, module = Data(), Boring()
    Trainer(max_epochs=3, reload_dataloaders_every_n_epochs=2, root_dir=tmp_path, **QUIET).fit(module, data)
    assert data.epochs == [0, 2]

    calls: list[int] = []

    class OnModule(Boring):  # loaders on the module reload too
        def train_dataloader(self) -> DataLoader:
            calls.append(self.current_epoch)
            return super().train_dataloader()

    Trainer(max_epochs=3, reload_dataloaders_every_n_epochs=1, root_dir=tmp_path, num_sanity_val_steps=0, **QUIET).fit(OnModule())
    assert calls == [0, 1, 2]


def test_barebones_writes_nothing_and_refuses_what_it_turns_off(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Lightning: trainer/flags/test_barebones.py::test_barebones_argument_selection (no logger, checkpoint,
    progress bar, summary, sanity check) and ::test_barebones_raises (asking for one of them is an error)."""
    with caplog.at_level(logging.INFO, logger="trainer"):
        trainer = Trainer(barebones=True, max_epochs=1, root_dir=tmp_path)
    assert "barebones=True" in caplog.text
    args = trainer.args
    assert (args.logger, args.enable_checkpointing, args.enable_progress_bar, args.enable_model_summary,
            args.num_sanity_val_steps) == (False, False, False, False, 0)
    trainer.fit(Boring())
    assert trainer.global_step == 8 and trainer.logger is None and list(tmp_path.iterdir()) == []
    for extra in ({"callbacks": [callbacks.ModelCheckpoint()]}, {"detect_anomaly": True}, {"profiler": "simple"},
                  {"fast_dev_run": 1}, {"logger": L.TensorBoardLogger(tmp_path)}, {"callbacks": [callbacks.TQDMProgressBar()]}):
        with pytest.raises(ValueError, match=r"Trainer\(barebones=True\)"):
            Trainer(barebones=True, **extra)


def test_every_flag_is_a_yaml_trainer_field() -> None:
    from trainer.config import prepare_config

    flags = dict(enable_model_summary=False, deterministic="warn", benchmark=True, detect_anomaly=True, sync_batchnorm=True,
                 inference_mode=False, use_distributed_sampler=False, overfit_batches=2, reload_dataloaders_every_n_epochs=1,
                 barebones=False, profiler="simple")
    config = {"model": {"class_path": "tests.helpers.reference.TinyNet"}, "data": {"class_path": "tests.helpers.gan.make_points"},
              "trainer": flags}
    trainer_section = prepare_config(config).plain["trainer"]
    assert {name: trainer_section[name] for name in flags} == flags
