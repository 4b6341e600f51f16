"""More of Lightning's documentation snippets, as users copy them, run under Lightning 2.6 and under
this package (imports changed only) in one process: the Trainer page's flags and properties, the
LightningModule page, the data pages' iterables, the training-tricks, transfer-learning, logging
and inference pages (tests/helpers/lightning_projects/docs_snippets2.py, 3 and 4 hold the
completed snippets). Compared: weights (`torch.equal`), steps, epochs, `callback_metrics`, results,
predictions, parameter groups and what the snippets record.

Where the numbers differ on purpose: a `should_stop` inside an epoch leaves `current_epoch` at the
epoch it happened in (docs/lightning.md, "Where we differ on purpose"), and `Tuner.lr_find`
sweeps `min_lr` to `max_lr` exactly and debiases its smoothed loss by the step's own index
(docs/tuning.md; Lightning's first point is `min_lr` and its smoothing divides by
`1 - beta ** (step + 2)`), so only its use is compared there.
"""

from __future__ import annotations

import datetime
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.helpers.lightning_projects import assert_same_weights, load_project


PROJECTS = ("docs_snippets2", "docs_snippets3", "docs_snippets4")


@pytest.fixture(scope="module")
def snippets() -> dict[str, Any]:
    """Each framework's version of the three snippet files, by framework."""
    return {fw: [load_project(name, fw) for name in PROJECTS] for fw in ("ours", "lightning")}


def both(snippets: dict[str, Any], run: str, root: Path, *args: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """`run(root / framework, *args)` from whichever snippet file defines it, in both frameworks."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Lightning's notes (srun, deprecations), not under test
        ours, theirs = (getattr(next(m for m in snippets[fw] if hasattr(m, run)), run)(root / fw, *args)
                        for fw in ("ours", "lightning"))
    return ours, theirs


def same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return bool(a == b)


def assert_same(ours: dict[str, Any], theirs: dict[str, Any], *extra: str, epochs: bool = True) -> None:
    assert_same_weights(ours["model"], theirs["model"])
    assert ours["trainer"].global_step == theirs["trainer"].global_step
    if epochs:
        assert ours["trainer"].current_epoch == theirs["trainer"].current_epoch
    lightning = {key: float(value) for key, value in theirs["trainer"].callback_metrics.items()}
    mine = ours["trainer"].callback_metrics
    assert {key: float(mine[key]) if key in mine else None for key in lightning} == lightning
    for key in extra:
        assert same(ours[key], theirs[key]), key


# ------------------------------------------------------------------------------ Trainer page
#: Every `Trainer(...)` of the Trainer page that names no TPU, HPU, GPU or several processes.
FLAGS: list[dict[str, Any]] = [
    dict(accelerator="cpu"), dict(accumulate_grad_batches=4), dict(barebones=True), dict(benchmark=None),
    dict(benchmark=True), dict(deterministic=False), dict(check_val_every_n_epoch=10), dict(detect_anomaly=True),
    dict(devices="auto", accelerator="auto"), dict(devices="auto", accelerator="cpu"), dict(enable_autolog_hparams=True),
    dict(enable_autolog_hparams=False), dict(enable_checkpointing=False), dict(enable_model_summary=False),
    dict(enable_progress_bar=False), dict(fast_dev_run=True), dict(fast_dev_run=7), dict(gradient_clip_algorithm=None),
    dict(gradient_clip_val=0.5, gradient_clip_algorithm="value"), dict(gradient_clip_val=0.5, gradient_clip_algorithm="norm"),
    dict(gradient_clip_val=None), dict(gradient_clip_val=0), dict(inference_mode=False), dict(limit_train_batches=0.25),
    dict(limit_train_batches=10), dict(limit_predict_batches=0.25), dict(limit_test_batches=10), dict(limit_val_batches=0),
    dict(log_every_n_steps=50), dict(max_epochs=1000), dict(min_epochs=1), dict(max_steps=-1), dict(max_steps=100),
    dict(min_steps=None), dict(min_steps=100, min_epochs=0), dict(max_time=None), dict(max_time="00:12:00:00", max_epochs=10),
    dict(max_time={"days": 1, "hours": 5}), dict(model_registry=None), dict(num_nodes=1), dict(num_sanity_val_steps=-1),
    dict(overfit_batches=0.01), dict(overfit_batches=10), dict(plugins=None), dict(precision="32"),
    dict(precision="bf16-mixed", devices=1), dict(profiler=None), dict(profiler="simple"), dict(reload_dataloaders_every_n_epochs=1),
    dict(sync_batchnorm=True), dict(use_distributed_sampler=True), dict(val_check_interval=0.25), dict(val_check_interval=1000),
    dict(val_check_interval=1000, check_val_every_n_epoch=None),
]


def test_every_trainer_flag_example_of_the_trainer_page_is_taken(tmp_path: Path) -> None:
    """Lightning's defaults written out (`gradient_clip_algorithm=None`, `num_nodes=1`,
    `model_registry=None`) and `enable_autolog_hparams` are taken, as a Hydra or LightningCLI
    dump that lists every argument writes them."""
    from trainer import Trainer

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for flags in FLAGS:
            Trainer(default_root_dir=tmp_path, **flags)
    assert Trainer(gradient_clip_val=0.5, gradient_clip_algorithm=None).args.gradient_clip_algorithm == "norm"
    assert Trainer(enable_autolog_hparams=False).enable_autolog_hparams is False


@pytest.mark.parametrize("interval", ["00:00:15:00", {"minutes": 15}, datetime.timedelta(hours=1)])
def test_a_wall_clock_validation_interval_is_refused_saying_what_to_write(interval: Any) -> None:
    from trainer import Trainer

    with pytest.raises(ValueError, match=r"validates by wall-clock time in Lightning; not taken here.*Expected an int"):
        Trainer(val_check_interval=interval)


def test_a_model_registry_name_says_to_upload_the_checkpoint_yourself() -> None:
    from trainer import Trainer

    with pytest.raises(ValueError, match=r"model_registry=\.\.\.\) is Lightning's.*upload the checkpoint yourself"):
        Trainer(model_registry="my-model-name")
    with pytest.raises(ValueError, match="num_nodes"):
        Trainer(num_nodes=8)


def test_should_stop_with_min_epochs_and_min_steps(snippets: dict[str, Any], tmp_path: Path) -> None:
    """The page's four `should_stop` snippets stop at Lightning's step; a stop inside an epoch
    leaves `current_epoch` at that epoch here (a deliberate difference), at an epoch's end the
    epochs agree too."""
    for when in ("any", "epoch", "step", "both"):
        ours, theirs = both(snippets, "run_should_stop", tmp_path / when, when)
        assert_same(ours, theirs, epochs=False)
        inside = ours["trainer"].global_step % 2 != 0 or when == "any"
        assert ours["trainer"].current_epoch + (1 if inside else 0) == theirs["trainer"].current_epoch
    assert ours["trainer"].global_step == 10  # min_epochs=5 of 2 batches


def test_trainer_properties_read_inside_a_run(snippets: dict[str, Any], tmp_path: Path) -> None:
    """`state.fn/status/stage`, `sanity_checking`, `is_global_zero`, `loggers`, the batch
    counts and `estimated_stepping_batches` sizing OneCycleLR, as the page reads them."""
    ours, theirs = both(snippets, "run_properties", tmp_path)
    assert_same(ours, theirs, "seen", "numbers", "final", "foo", "lr")
    assert ("val", "TrainerFn.FITTING", "RunningStage.SANITY_CHECKING", True) in [tuple(s) for s in ours["seen"]]


def test_enable_autolog_hparams(snippets: dict[str, Any], tmp_path: Path) -> None:
    """False: only the module's own `self.logger.log_hyperparams(self.hparams, {"hp/metric_1": 0,
    ...})` (the logging page's snippet) reaches the logger, as in Lightning; True: the
    automatic call comes first, and again for `validate`."""
    for autolog in (False, True):
        ours, theirs = both(snippets, "run_autolog", tmp_path / str(autolog), autolog)
        assert_same(ours, theirs, "calls")
        assert len(ours["calls"]) == (3 if autolog else 1)
        assert ours["calls"][-1 if not autolog else 1][2] == {"hp/metric_1": 0, "hp/metric_2": 0}


def test_gradient_clip_algorithm_none_clips_by_norm(snippets: dict[str, Any], tmp_path: Path) -> None:
    ours, theirs = both(snippets, "run_clip_algorithm_none", tmp_path)
    assert_same(ours, theirs)


# ------------------------------------------------------------------- LightningModule page
def test_lightning_module_page(snippets: dict[str, Any], tmp_path: Path) -> None:
    """A task around any model (`log_dict` in validation and test, `predict_step` with
    `dataloader_idx=0`, outputs kept for `on_train_epoch_end`), `save_checkpoint` then
    `load_from_checkpoint` with the model passed again, `save_hyperparameters("layer_1_dim")`
    and `ignore=[...]` with the ignored ones given back at loading, and `predict_step(self, batch)`
    with a DataModule passed positionally to `predict`."""
    ours, theirs = both(snippets, "run_module_page", tmp_path)
    assert_same(ours, theirs, "validated", "tested", "predictions", "y_hat", "hparams", "reloaded", "forwarded")
    assert ours["hparams"] == {"layer_1_dim": 6} and ours["reloaded"] == ({"layer_1_dim": 6}, "L1Loss", 6)


# --------------------------------------------------------------------------------- data pages
@pytest.mark.parametrize("source", ["list", "nested"])
def test_training_iterables_of_the_data_page(source: str, snippets: dict[str, Any], tmp_path: Path) -> None:
    """`return list(range(1000))` (a plain list) and `return {"a": [dl1, dl2], "b": [dl3, dl4]}`
    from `train_dataloader()`: the nested dict is combined (max_size_cycle) into batches of the
    same nesting, as in Lightning (it was iterated as a plain dict, over its keys)."""
    ours, theirs = both(snippets, "run_iterables", tmp_path, source)
    assert_same(ours, theirs, "batches")
    if source == "nested":
        assert isinstance(ours["batches"][0], dict) and len(ours["batches"][0]["a"]) == 2


# ------------------------------------------------------------------ training tricks, transfer
def test_weight_averaging_subclass_and_lr_find(snippets: dict[str, Any], tmp_path: Path) -> None:
    """The page's `EMAWeightAveraging(WeightAveraging)` with `should_update`: Lightning's
    weights. `Tuner(trainer).lr_find(model)` sets `learning_rate` (or `attr_name`) to its own
    suggestion in both (the sweeps differ on purpose, see the module docstring)."""
    ours, theirs = both(snippets, "run_training_tricks", tmp_path)
    assert_same(ours, theirs)
    for result in (ours, theirs):
        assert result["learning_rate"] == (result["suggestion"] or 0.1)
        value, learning_rate, suggestion = result["my_value"]
        assert value == suggestion and learning_rate == 0.1
    assert len(ours["lr"]) == len(ours["loss"]) == 20 and ours["lr"][0] == theirs["lr"][0] == 1e-8


@pytest.mark.parametrize("which", ["custom", "backbone"])
def test_transfer_learning_page_finetuning_callbacks(which: str, snippets: dict[str, Any], tmp_path: Path) -> None:
    """The page's `CustomFinetuning(BaseFinetuning)` (it adds the same layers again every epoch
    after the unfreeze: skipped, as Lightning skips them) and its `BackboneFinetuning`."""
    ours, theirs = both(snippets, "run_transfer_learning", tmp_path, which)
    assert_same(ours, theirs, "groups", "trainable")
    assert len(ours["groups"]) == 2


# ------------------------------------------------------------------------------ logging pages
def test_logging_pages_self_log_options(snippets: dict[str, Any], tmp_path: Path) -> None:
    """`on_step`/`on_epoch`, `reduce_fx` ("max", "min", "sum", `torch.mean`), `batch_size=10`,
    a plain int (`batch_idx + 1`), `log_dict` and a torchmetrics `Metric` of one's own."""
    ours, theirs = both(snippets, "run_logging", tmp_path)
    assert_same(ours, theirs, "validated")
    lightning = theirs["fitted"]
    assert {"max_loss_epoch", "sum_loss", "mean_loss", "average_value", "min_val", "train_acc_step", "acc"} <= set(lightning)
    assert {key: ours["fitted"].get(key) for key in lightning} == lightning


# ---------------------------------------------------------------------------- inference pages
def test_monte_carlo_dropout_predictions_and_a_traced_module(snippets: dict[str, Any], tmp_path: Path) -> None:
    ours, theirs = both(snippets, "run_inference", tmp_path)
    assert_same(ours, theirs, "predictions", "script", "eager", "training")
    assert torch.equal(ours["script"], ours["eager"])


def test_self_log_from_every_hook_of_the_logging_table(snippets: dict[str, Any], tmp_path: Path) -> None:
    """`self.log` in the module's hooks and `pl_module.log` in a callback's, each hook of the
    logging page's table of `on_step`/`on_epoch` defaults: the same names and values logged and
    in `callback_metrics`. `on_before_zero_grad` runs after the step here, Lightning's before the
    backward (docs/hooks.md), so what it logs is read from other weights."""
    ours, theirs = both(snippets, "run_hook_logging", tmp_path)
    moved = {"module/on_before_zero_grad", "callback/on_before_zero_grad"}
    assert_same_weights(ours["model"], theirs["model"])
    for observed in ("logged", "callback_metrics"):
        mine, lightning = ((result[observed] if observed == "logged" else
                            {k: float(v) for k, v in result["trainer"].callback_metrics.items()}) for result in (ours, theirs))
        assert len(lightning) == 2 * len(snippets["ours"][1].LOGGING_HOOKS) + 1
        assert {k: mine.get(k) for k in lightning if k not in moved} == {k: v for k, v in lightning.items() if k not in moved}
        assert moved <= set(mine)


# ------------------------------------------------------------------------------ datamodule page
def test_datamodule_page(snippets: dict[str, Any], tmp_path: Path) -> None:
    """The page's DataModule (`setup` by stage, a seeded `random_split`, four loaders,
    `teardown`), `prepare_data`/`setup("fit")` called by hand first, `fit(model, dm)`, then
    `test`, `validate` and `predict` with `datamodule=dm` only: the same hook calls, loaders,
    results and predictions; `save_hyperparameters()` of `*args, **kwargs`. The page's "random
    list of batches" given to `fit` trains here; Lightning 2.6 takes that list for several
    loaders and its step gets no `(x, y)` pair."""
    ours, theirs = both(snippets, "run_datamodule", tmp_path)
    assert_same(ours, theirs, "calls", "lengths", "tested", "validated", "predicted", "custom")
    assert ours["calls"][:2] == ["prepare_data", "setup:fit"] and ours["custom"] == {"lr": 0.1, "width": 3}
    assert isinstance(theirs["listed"], ValueError) and ours["listed"][0] == 5


# ----------------------------------------------------------------------------------- speed page
def test_speed_page_gan_zero_grad_and_compiled_module(snippets: dict[str, Any], tmp_path: Path) -> None:
    """The speed page's GAN (`toggle_model(sync_grad=...)`, steps on every second batch or the
    epoch's last), `optimizer_zero_grad` with `set_to_none=True` under accumulation, and a
    module given to `fit` as `torch.compile(model)`."""
    ours, theirs = both(snippets, "run_speed", tmp_path)
    assert_same(ours, theirs, "compiled", "compiled_steps")
    assert ours["compiled_steps"] == 4


def test_a_list_of_loggers_and_a_simple_profiler_file(snippets: dict[str, Any], tmp_path: Path) -> None:
    """`Trainer(logger=[csv_logger, tb_logger])`: `trainer.logger` is the first, `log_dir` its
    folder, both write `hparams.yaml` (here the module's part sits under `module:`, beside the
    Trainer's, docs/logging.md) and `metrics.csv` has Lightning's columns (with the Trainer's own
    `train/...` beside them); `SimpleProfiler(dirpath, filename="perf_logs")` writes
    `fit-perf_logs.txt`, as Lightning's."""
    ours, theirs = both(snippets, "run_loggers_and_profiler", tmp_path)
    assert_same(ours, theirs, "logger", "count", "report", "log_dir")
    assert [each["module"] for each in ours["hparams"]] == theirs["hparams"]
    assert set(theirs["columns"]) <= set(ours["columns"])
    assert ours["report"] == ["fit-perf_logs.txt"] and ours["log_dir"] is True


# ------------------------------------------------------------------------------------ hooks page
def test_hooks_page_order_of_callbacks_and_module(snippets: dict[str, Any], tmp_path: Path) -> None:
    """Callbacks before the module in `on_train_start`; in `on_train_epoch_end` the other
    callbacks before the monitoring ones (EarlyStopping, checkpoints) whatever order they were
    given in, as Lightning runs them. The module's `on_train_epoch_end` runs before every
    callback here (docs/hooks.md, "Where we differ from Lightning")."""
    ours, theirs = both(snippets, "run_hooks_order", tmp_path)
    assert_same(ours, theirs)
    lightning = list(theirs["printed"])
    lightning.remove("Model: epoch end")
    lightning.insert(lightning.index("Model: Training is starting!") + 1, "Model: epoch end")
    assert ours["printed"] == lightning


def test_early_stopping_sees_what_a_callback_logged_at_the_epoch_end(snippets: dict[str, Any], tmp_path: Path) -> None:
    """EarlyStopping given before the callback whose `on_train_epoch_end` logs its monitor: it
    checks after that callback and sees the value just logged, so it stops where Lightning's
    does (it found the monitor missing)."""
    ours, theirs = both(snippets, "run_callback_metric_stopping", tmp_path)
    assert_same(ours, theirs, "stopped", "best")
    assert ours["stopped"] == 2


def test_lightning_module_api_examples(snippets: dict[str, Any], tmp_path: Path) -> None:
    """The API pages' examples: `validation_step(..., dataloader_idx=0)` over two loaders with
    names of its own, `configure_callbacks` returning an EarlyStopping and a ModelCheckpoint
    (the latter replacing the Trainer's), `self.print` in `forward`, `load_from_checkpoint`
    with a dict `map_location` and overrides, `freeze`, `to_torchscript(file_path=...,
    method="trace")`, and `toggled_optimizer` under manual optimization."""
    ours, theirs = both(snippets, "run_module_api", tmp_path)
    assert_same(ours, theirs, "best", "stopped", "loaded", "traced", "printed", "toggled", "callbacks")
    assert ours["stopped"] > 0 and ours["printed"] > 0 and torch.equal(*ours["traced"])
    assert ours["loaded"][0] == {"num_layers": 128, "pretrained_ckpt_path": "new"}


def test_seed_everything_workers_seeds_numpy_random_and_torch_in_each_worker(
        snippets: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Trainer page's `seed_everything(42, workers=True)` with `deterministic=True`: the
    loaders get Lightning's `worker_init_fn`, so the augmentations two workers draw from
    NumPy, `random` and torch are Lightning's, in training and in prediction, and no two
    samples repeat a NumPy draw (a forked worker otherwise copies the parent's NumPy state)."""
    for name in ("PL_SEED_WORKERS", "PL_GLOBAL_SEED"):
        monkeypatch.delenv(name, raising=False)  # seed_everything sets them: restored after the test
    ours, theirs = both(snippets, "run_reproducibility", tmp_path)
    assert_same(ours, theirs, "seen", "predicted")
    assert len(set(ours["seen"][:, 1].tolist())) == 16


def test_the_worker_init_function_draws_lightnings_numbers() -> None:
    import random

    import numpy as np
    from lightning.fabric.utilities.seed import pl_worker_init_function as theirs

    from trainer.utilities.seed import pl_worker_init_function as ours

    saved = (torch.get_rng_state(), random.getstate(), np.random.get_state())
    try:
        for worker, rank in ((0, 0), (1, 0), (3, 2)):
            draws = []
            for init in (ours, theirs):
                torch.manual_seed(1234 + worker)  # a worker's torch seed: PyTorch's base seed + its id
                init(worker, rank=rank)
                draws.append((torch.rand(2).tolist(), random.random(), np.random.rand()))
            assert draws[0] == draws[1]
    finally:
        torch.set_rng_state(saved[0]), random.setstate(saved[1]), np.random.set_state(saved[2])


def test_lightnings_signature_defaults_written_out_as_none(tmp_path: Path) -> None:
    """Every argument whose default in Lightning's signature is None, passed as None (what a
    config listing the whole signature writes): the same Trainer as Lightning's defaults."""
    import inspect

    import lightning.pytorch as pl

    from trainer import Trainer

    nones = {name: None for name, p in inspect.signature(pl.Trainer.__init__).parameters.items() if p.default is None}
    assert {"precision", "logger", "log_every_n_steps", "enable_checkpointing", "enable_model_summary"} <= set(nones)
    nones["default_root_dir"] = tmp_path
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours, theirs = Trainer(**nones), pl.Trainer(**nones)
    for name in ("precision", "log_every_n_steps", "num_sanity_val_steps", "gradient_clip_val"):
        assert (name, getattr(ours, name)) == (name, getattr(theirs, name))
    assert ours.checkpoint_callback is not None and ours.logger is not None and ours.args.enable_progress_bar
    assert ours.args.gradient_clip_algorithm == "norm" and ours.args.enable_model_summary


def test_inference_mode_false_and_fast_dev_run(snippets: dict[str, Any], tmp_path: Path) -> None:
    """`Trainer(inference_mode=False)` with `torch.enable_grad()` in `validation_step` (a gradient
    taken there), and `Trainer(fast_dev_run=7)`: 7 training steps, 7 predict batches."""
    ours, theirs = both(snippets, "run_trainer_flags", tmp_path)
    assert_same(ours, theirs, "validated", "grads", "predicted", "steps")
    assert ours["predicted"] == ours["steps"] == 7


def test_production_page_prediction_writer(snippets: dict[str, Any], tmp_path: Path) -> None:
    """The production page's `CustomWriter(BasePredictionWriter)` at `write_interval="epoch"` with
    `predict(model, return_predictions=False)`: the same two files, predictions and indices."""
    ours, theirs = both(snippets, "run_prediction_writer", tmp_path)
    assert_same(ours, theirs, "returned", "files", "predictions", "batch_indices")
    assert ours["returned"] is None and ours["files"] == ["batch_indices_0.pt", "predictions_0.pt"]
