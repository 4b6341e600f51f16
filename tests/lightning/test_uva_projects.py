"""The UvA deep-learning course's notebooks (Lightning-AI/tutorials, course_UvA-DL 04, 05, 06
and 07; 02 and 03 train by hand, without Lightning), written by others for Lightning, trained here with only their imports changed and
compared with Lightning 2.6 in one process (tests/helpers/lightning_projects/uva_*.py, each
saying what was shrunk): the weights, steps and epochs, what `trainer.test` returns, the
metrics Lightning reports, the best checkpoint's name and the module `load_from_checkpoint`
rebuilds from it, the event files the notebooks ask for, and what each notebook computes with
the trained model afterwards. All equal with `torch.equal` or `==`.

Next to them, what these notebooks found different before, checked on its own: Lightning's
logger attributes set after construction (`trainer.logger._log_graph = True`,
`trainer.logger._default_hp_metric = None`); a tuple hyperparameter (`img_shape=(1, 28, 28)`),
which `load_from_checkpoint` must give back as a tuple; the size of a batch that is an object
(a graph library's batch), which weighs epoch means; and callbacks written for Lightning 1
(`on_epoch_end`), which neither framework calls and which now get a warning naming the hook
to write instead (tests/lightning/test_removed_hooks.py: the module's `*_epoch_end(outputs)`).
"""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import trainer as L
from tests.helpers.lightning_projects import (
    assert_same_run,
    assert_same_weights,
    both,
    lightnings_values,
    load_project,
    load_source,
)
from trainer.checkpoint.run_facts import differences

EventAccumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator").EventAccumulator
pytest.importorskip("lightning")


def floats(metrics: dict[str, Any]) -> dict[str, float]:
    return {key: float(value) for key, value in metrics.items()}


def event_tags(run_dir: Path) -> list[dict[str, Any]]:
    """The tags of each event file of a run's folder, oldest first."""
    files = sorted(run_dir.glob("events.out.tfevents.*"), key=lambda p: int(p.name.rsplit(".", 1)[1]))
    return [EventAccumulator(str(f)).Reload().Tags() for f in files]


def assert_same_best(ours: dict[str, Any], theirs: dict[str, Any]) -> None:
    """The same best checkpoint file name, and the module rebuilt from it has the same weights."""
    ours_path = Path(ours["trainer"].checkpoint_callback.best_model_path)
    theirs_path = Path(theirs["trainer"].checkpoint_callback.best_model_path)
    assert ours_path.name == theirs_path.name and ours_path.is_file()
    assert_same_weights(ours["best"], theirs["best"])


# =================================================================== 04: GoogleNet, ResNet, DenseNet
def test_inception_resnet_densenet_notebook(tmp_path: Path) -> None:
    """CIFARModule with the notebook's ResNet: [SGD], [MultiStepLR], ModelCheckpoint(mode="max",
    save_weights_only), LearningRateMonitor("epoch"), the graph through
    `trainer.logger._log_graph = True`. (The project's GoogleNet and DenseNet, `run=...`, train
    to Lightning's weights too; left out here for time: tracing their graphs takes seconds.)"""
    ours, theirs = both("uva_convnets", tmp_path, run="ResNet")
    assert_same_run(ours, theirs, stages=("val", "test"))
    assert ours["result"] == theirs["result"]
    lightnings_values(floats(ours["fit_metrics"]), floats(theirs["fit_metrics"]))
    assert_same_best(ours, theirs)
    assert ours["best"].hparams == theirs["best"].hparams
    runs_ours, runs_theirs = event_tags(Path(ours["trainer"].logger.log_dir)), event_tags(Path(theirs["trainer"].logger.log_dir))
    assert len(runs_ours) == len(runs_theirs) == 3  # fit, then the two tests
    assert all(tags["graph"] for tags in runs_ours + runs_theirs)  # the notebook's trainer.logger._log_graph = True
    fit_ours, fit_theirs = runs_ours[0], runs_theirs[0]
    assert "hp_metric" not in fit_ours["scalars"] and "hp_metric" not in fit_theirs["scalars"]
    assert set(fit_theirs["scalars"]) <= set(fit_ours["scalars"])


# ======================================================== 05: transformers and multi-head attention
def test_reverse_task_notebook(tmp_path: Path) -> None:
    """A scheduler kept on the module and stepped in an `optimizer_step` override, gradient
    clipping, `max_iters` from `trainer.max_epochs`; the trained module tested on two loaders."""
    ours, theirs = both("uva_transformers", tmp_path, task="reverse")
    assert_same_run(ours, theirs, stages=("val",))
    assert (ours["test_acc"], ours["val_acc"]) == (theirs["test_acc"], theirs["val_acc"])
    assert ours["model"].lr_scheduler.last_epoch == theirs["model"].lr_scheduler.last_epoch == ours["trainer"].global_step
    assert ours["model"].lr_scheduler.get_last_lr() == theirs["model"].lr_scheduler.get_last_lr()
    assert Path(ours["trainer"].checkpoint_callback.best_model_path).name == Path(theirs["trainer"].checkpoint_callback.best_model_path).name


def test_set_anomaly_task_notebook(tmp_path: Path) -> None:
    """Sets sampled from NumPy's global stream in `__getitem__`, dropout, a three-part batch,
    the best checkpoint loaded and tested on the train, validation and test loaders."""
    ours, theirs = both("uva_transformers", tmp_path, task="anomaly")
    assert_same_run(ours, theirs, stages=("val",))
    assert [ours[k] for k in ("train_acc", "val_acc", "test_acc")] == [theirs[k] for k in ("train_acc", "val_acc", "test_acc")]
    assert_same_best(ours, theirs)


# ============================================================== 06: graph neural networks (the MLP)
def test_node_classifier_notebook(tmp_path: Path) -> None:
    """One whole graph per batch (an object with `.to()`, not a tensor or a collection of them),
    used for training, validation and test; `seed_everything()` without a seed takes the one
    set before; the best of 10 epochs loaded and tested, then its `forward` on a batch."""
    ours, theirs = both("uva_gnn", tmp_path)
    assert_same_run(ours, theirs, stages=("test",))
    lightnings_values(floats(ours["fit_metrics"]), floats(theirs["fit_metrics"]))
    assert_same_best(ours, theirs)
    assert ours["result"] == theirs["result"]


@dataclasses.dataclass
class Pair:
    ids: list[str]
    x: torch.Tensor


def eval_batches(kind: str, graph_class: type) -> list[Any]:
    sizes = (2, 9, 4)
    if kind == "graph":  # torch_geometric's Batch: iterates over (name, tensor), the node features first
        return [graph_class(x=torch.full((n, 3), float(n)), edge_index=torch.zeros(2, 7, dtype=torch.long)) for n in sizes]
    if kind == "dataclass":
        return [Pair(ids=["a"] * n, x=torch.full((n, 3), float(n))) for n in sizes]
    return [(torch.tensor(float(n)), torch.full((n, 3), float(n))) for n in sizes]  # a 0-dim tensor first


@pytest.mark.parametrize("kind", ["graph", "dataclass", "scalar_first"])
def test_epoch_means_weigh_a_batch_object_as_lightning(kind: str) -> None:
    """`self.log` in `validation_step` weighs each batch by its inferred size: for a batch that
    is an object (a graph library's batch, a dataclass) or starts with a 0-dim tensor, the
    size is found by Lightning's rule, so the epoch mean is Lightning's."""
    results = {}
    for framework in ("ours", "lightning"):
        project = load_project("uva_gnn", framework)

        class Logs(project.pl.LightningModule):  # type: ignore[name-defined, misc]
            def validation_step(self, batch: Any, batch_idx: int) -> None:
                x = batch.x if kind != "scalar_first" else batch[1]
                self.log("v", x[0, 0])

        trainer = project.pl.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False, accelerator="cpu")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Lightning's "ambiguous collection" warning
            loader = DataLoader(eval_batches(kind, project.Graph), batch_size=None)
            results[framework] = dict(trainer.validate(Logs(), loader, verbose=False)[0])
    assert results["ours"] == results["lightning"]
    assert results["ours"]["v"] != sum((2.0, 9.0, 4.0)) / 3 or kind == "scalar_first"  # weighted, not a plain mean


# ============================================================ 07: deep energy-based generative models
def test_energy_model_notebook(tmp_path: Path) -> None:
    """MCMC inside `training_step` (eval mode, parameters frozen, grad re-enabled) drawing from
    NumPy, Python and torch; the batch changed in place; StepLR with LearningRateMonitor;
    callbacks whose `on_epoch_end` neither calls; then the notebook's look at the best module."""
    with pytest.warns(UserWarning, match=r"GenerateCallback defines `on_epoch_end`, a hook of Lightning 1 .* on_train_epoch_end"):
        ours, theirs = both("uva_energy", tmp_path)
    assert_same_run(ours, theirs)
    lightnings_values(floats(ours["val"]), floats(theirs["val"]))
    assert_same_best(ours, theirs)
    assert ours["best"].hparams.img_shape == theirs["best"].hparams.img_shape == (1, 28, 28)
    assert type(ours["best"].hparams.img_shape) is type(theirs["best"].hparams.img_shape) is tuple
    for key in ("generated", "rand_out", "buffer"):
        assert torch.equal(ours[key], theirs[key]), key
    assert not any("rand_out" in tags["scalars"] or tags.get("images") for tags in event_tags(Path(ours["trainer"].logger.log_dir)))


# ======================================================================= the differences found, alone
class Shaped(L.LightningModule):
    def __init__(self, shape: tuple[int, ...] = (1, 2), dtype: torch.dtype = torch.float64, pair: tuple[Any, ...] = ("a", (1, 2.0))) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.layer = torch.nn.Linear(shape[-1], 1)
        self.example_input_array = torch.zeros(shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self(batch[0]).square().mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def fit_shaped(tmp_path: Path, **logger_flags: Any) -> L.Trainer:
    trainer = L.Trainer(default_root_dir=tmp_path, max_steps=2, enable_progress_bar=False, enable_model_summary=False)
    for name, value in logger_flags.items():
        setattr(trainer.logger, name, value)
    trainer.fit(Shaped(shape=(3, 2), dtype=torch.float16, pair=("b", (3, 4.0))), DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=4))
    return trainer


def test_tuple_hyperparameters_come_back_as_tuples(tmp_path: Path) -> None:
    """Lightning's `load_from_checkpoint` gives a module the tuple (and the dtype) it was built
    with; a tuple turned into a list broke the energy notebook's `(1,) + img_shape`."""
    trainer = fit_shaped(tmp_path)
    path = tmp_path / "shaped.ckpt"
    trainer.save_checkpoint(path)
    loaded = Shaped.load_from_checkpoint(path)
    assert loaded.hparams.shape == (3, 2) and type(loaded.hparams.shape) is tuple
    assert loaded.hparams.dtype is torch.float16
    assert loaded.hparams.pair == ("b", (3, 4.0)) and type(loaded.hparams.pair[1]) is tuple
    assert torch.load(path, weights_only=True)["hyper_parameters"]["shape"] == (3, 2)  # still a weights-only file


def test_a_checkpoint_with_a_tuple_saved_as_a_list_is_the_same_experiment() -> None:
    """Older checkpoints hold such a tuple as a list: `ckpt_path="last"` still continues them."""
    assert differences({"hyperparameters": {"shape": [3, 2], "pair": ["b", [3, 4.0]]}},
                       {"hyperparameters": {"shape": (3, 2), "pair": ("b", (3, 4.0))}}) == ""
    assert "shape" in differences({"hyperparameters": {"shape": [3, 2]}}, {"hyperparameters": {"shape": (2, 3)}})


@pytest.mark.parametrize("hook", ["on_epoch_end", "on_batch_start", "on_pretrain_routine_start"])
def test_a_lightning_1_hook_is_named_with_its_replacement_before_work(hook: str, tmp_path: Path) -> None:
    """Neither Lightning 2 nor this package calls a hook Lightning 2 removed (the energy
    notebook's callbacks define `on_epoch_end`); here a warning says so when the run starts,
    naming the hook to write instead, for a callback and for a module alike."""
    calls: list[str] = []

    class Legacy(L.Callback):
        pass

    setattr(Legacy, hook, lambda self, *args: calls.append(hook))
    with pytest.warns(UserWarning, match=f"Legacy defines `{hook}`, a hook of Lightning 1") as record:
        trainer = L.Trainer(default_root_dir=tmp_path, max_steps=1, logger=False, enable_checkpointing=False,
                            enable_progress_bar=False, enable_model_summary=False, callbacks=[Legacy()])
        trainer.fit(Shaped(), DataLoader(TensorDataset(torch.randn(4, 2)), batch_size=2))
    assert calls == [] and "Expected on_" in str(record[0].message)
    module = Shaped()
    setattr(type(module), hook, lambda self, *args: calls.append(hook))
    try:
        with pytest.warns(UserWarning, match=f"Shaped defines `{hook}`"):
            L.Trainer(max_steps=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                      enable_model_summary=False).fit(module, DataLoader(TensorDataset(torch.randn(4, 2)), batch_size=2))
    finally:
        delattr(type(module), hook)
    assert calls == []


NOISY = """
import torch
from torch.utils.data import DataLoader, TensorDataset

import trainer as pl
from callbacks import ModelSummary


class Noisy(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5), torch.nn.Linear(4, 1))
        self.example_input_array = torch.zeros(2, 4)

    def forward(self, x):
        return self.layer(x + torch.randn_like(x))  # noise in every mode, as a denoising model adds it

    def training_step(self, batch, batch_idx):
        return self(batch[0]).square().mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main(root_dir, summary):
    pl.seed_everything(1)
    callbacks = [ModelSummary(max_depth=2)] if summary == "callback" else []
    trainer = pl.Trainer(default_root_dir=root_dir, max_epochs=2, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=summary != "off", callbacks=callbacks)
    model = Noisy()
    trainer.fit(model, DataLoader(TensorDataset(torch.randn(16, 4)), batch_size=4, shuffle=True))
    return model
"""


@pytest.mark.parametrize("summary", ["default", "callback", "off"])
def test_the_model_summary_runs_the_example_input_as_lightnings(summary: str, tmp_path: Path) -> None:
    """Lightning's model summary runs `example_input_array` through the module when fit starts
    (eval mode, no gradients); a forward that draws noise moves torch's stream there. The
    notebooks set an example input with the summary on: the weights after it are Lightning's."""
    ours = load_source(NOISY, "ours", "noisy").main(tmp_path / "ours", summary)
    theirs = load_source(NOISY, "lightning", "noisy").main(tmp_path / "lightning", summary)
    assert_same_weights(ours, theirs)
    assert ours.training and all(m.training for m in ours.modules())


def test_lightnings_logger_attributes_set_after_construction(tmp_path: Path) -> None:
    """`trainer.logger._log_graph = True` adds the graph, `_default_hp_metric = True` the
    placeholder `hp_metric` (the names Lightning's TensorBoardLogger keeps its flags under)."""
    trainer = fit_shaped(tmp_path / "on", _log_graph=True, _default_hp_metric=True)
    assert trainer.logger._log_graph is True and trainer.logger._default_hp_metric is True
    (tags,) = event_tags(Path(trainer.logger.log_dir))
    assert tags["graph"] and "hp_metric" in tags["scalars"]
    trainer = fit_shaped(tmp_path / "off", _log_graph=False, _default_hp_metric=None)
    (tags,) = event_tags(Path(trainer.logger.log_dir))
    assert not tags["graph"] and "hp_metric" not in tags["scalars"]
