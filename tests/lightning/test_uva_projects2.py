"""The UvA deep-learning course's notebooks 08-13 (Lightning's tutorials, course_UvA-DL), as
projects in tests/helpers/lightning_projects/uva_*.py with only their imports changed, trained
under this package and under Lightning in one process and compared with `torch.equal`:
weights, counters, `callback_metrics`, what `trainer.test` returns, the best checkpoint's
file name and the weights `load_from_checkpoint` reads from it, and the images and graph the
runs write to TensorBoard.

Where the layouts differ on purpose (docs/lightning.md): our default logger folder is
`default/version_N` (Lightning's `lightning_logs/version_N`), we also write `last.ckpt`, and our
own `train/*` scalars join `callback_metrics`; the comparisons leave those out.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from tests.helpers.lightning_projects import assert_same_run, assert_same_weights, both, lightnings_values, run


def metrics(trainer: Any) -> dict[str, float]:
    return {key: float(value) for key, value in trainer.callback_metrics.items()}


def same_best(ours: Any, theirs: Any, module_class: str) -> None:
    """The best checkpoint: the same file name, and the same weights loaded from it."""
    mine, other = Path(ours["trainer"].checkpoint_callback.best_model_path), Path(theirs["trainer"].checkpoint_callback.best_model_path)
    assert mine.name == other.name
    assert_same_weights(ours["best"], theirs["best"])
    assert type(ours["best"]).__name__ == type(theirs["best"]).__name__ == module_class


def event_values(folder: Path) -> dict[str, Any]:
    """Per event file (in order): its image payloads per tag and whether it holds a graph."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    files = []
    for path in sorted(folder.glob("events.out.tfevents.*"), key=lambda p: int(p.name.rsplit(".", 1)[1])):
        events = EventAccumulator(str(path), size_guidance={"images": 0})
        events.Reload()
        tags = events.Tags()
        images = {tag: [(e.step, e.encoded_image_string) for e in events.Images(tag)] for tag in tags["images"]}
        files.append({"images": images, "graph": bool(tags["graph"])})
    return {"files": files}


# ----------------------------------------------------------------------------- 12: meta-learning
def test_protonet(tmp_path: Path) -> None:
    ours, theirs = both("uva_meta", tmp_path, model="protonet")
    assert_same_run(ours, theirs)
    lightnings_values(metrics(ours["trainer"]), metrics(theirs["trainer"]))
    same_best(ours, theirs, "ProtoNet")


def test_protomaml_steps_its_optimizer_and_finetunes_inside_validation(tmp_path: Path) -> None:
    """ProtoMAML's training_step steps `self.optimizers()` itself and returns None under automatic
    optimization (one step per batch counts, as Lightning's loop counts it), and its
    validation_step turns gradients on to fine-tune a copy: validation inside fit runs under
    `no_grad`, not `inference_mode`, as Lightning's does (the Trainer keeps its default)."""
    ours, theirs = both("uva_meta", tmp_path, model="protomaml")
    assert theirs["trainer"].global_step == 2 * 2  # two task batches per epoch, two epochs
    assert_same_run(ours, theirs)
    lightnings_values(metrics(ours["trainer"]), metrics(theirs["trainer"]))
    same_best(ours, theirs, "ProtoMAML")


def test_validation_inside_fit_runs_under_no_grad() -> None:
    """What a `validation_step` sees: inside fit (sanity check, epoch end) `no_grad` without
    inference mode, in `trainer.validate` inference mode: Lightning's, with its default
    `inference_mode=True`."""
    import lightning as L

    import trainer as ours

    seen: dict[str, list[tuple[str, bool, bool]]] = {}
    for name, framework in (("ours", ours), ("lightning", L)):
        record: list[tuple[str, bool, bool]] = seen.setdefault(name, [])

        class Net(framework.LightningModule):  # type: ignore[name-defined,misc]
            def __init__(self) -> None:
                super().__init__()
                self.layer = torch.nn.Linear(2, 1)

            def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
                return self.layer(batch[0]).sum()

            def validation_step(self, batch: Any, batch_idx: int) -> None:
                stage = "sanity" if self.trainer.sanity_checking else self.phase
                record.append((stage, torch.is_grad_enabled(), torch.is_inference_mode_enabled()))

            def configure_optimizers(self) -> torch.optim.Optimizer:
                return torch.optim.SGD(self.parameters(), lr=0.1)

        loader = DataLoader(TensorDataset(torch.randn(4, 2)), batch_size=2)
        trainer = framework.Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                                    enable_model_summary=False, accelerator="cpu", num_sanity_val_steps=1)
        model = Net()
        model.phase = "fit"
        trainer.fit(model, loader, loader)
        model.phase = "validate"
        trainer.validate(model, loader, verbose=False)
    assert seen["ours"] == seen["lightning"]
    assert ("fit", False, False) in seen["ours"] and seen["ours"][-1][2] is True


@pytest.mark.parametrize("clip", [None, 0.01])
def test_an_automatic_step_that_steps_the_optimizer_itself_counts_once(clip: float | None) -> None:
    """`self.optimizers().step()` inside a training_step that returns None, under automatic
    optimization: the weights move once per batch, `global_step` counts the batch once, and
    the Trainer's `gradient_clip_val` clips that step, as Lightning's precision clips it."""
    import lightning as L

    import trainer as ours

    results = {}
    for name, framework in (("ours", ours), ("lightning", L)):
        class Net(framework.LightningModule):  # type: ignore[name-defined,misc]
            def __init__(self) -> None:
                super().__init__()
                self.layer = torch.nn.Linear(2, 1)

            def training_step(self, batch: Any, batch_idx: int) -> None:
                self.layer(batch[0]).pow(2).sum().backward()
                opt = self.optimizers()
                opt.step()
                opt.zero_grad()
                return None

            def configure_optimizers(self) -> torch.optim.Optimizer:
                return torch.optim.SGD(self.parameters(), lr=0.1)

        torch.manual_seed(0)
        model = Net()
        trainer = framework.Trainer(max_epochs=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                                    enable_model_summary=False, accelerator="cpu", gradient_clip_val=clip)
        trainer.fit(model, DataLoader(TensorDataset(torch.arange(12.0).view(6, 2)), batch_size=2))
        results[name] = (trainer.global_step, copy.deepcopy(model.layer.state_dict()))
    assert results["ours"][0] == results["lightning"][0] == 6
    assert_same_weights(results["ours"][1], results["lightning"][1])


# ------------------------------------------------------------------------ 08: autoencoder
def test_autoencoder(tmp_path: Path) -> None:
    """The GenerateCallback's images, and the graph `trainer.logger._log_graph = True` asks for in
    every event file (fit and both tests), as Lightning writes them; ReduceLROnPlateau on
    `val_loss` given beside the optimizer; `trainer.test` on the validation loader."""
    ours = run("uva_autoencoder", "ours", tmp_path, latent_dims=(8,), load_back=True)
    theirs = run("uva_autoencoder", "lightning", tmp_path, latent_dims=(8,))
    assert_same_run(ours, theirs, stages=("val", "test"))
    lightnings_values(metrics(ours["trainer"]), metrics(theirs["trainer"]))
    mine, other = Path(ours["trainer"].checkpoint_callback.best_model_path), Path(theirs["trainer"].checkpoint_callback.best_model_path)
    assert mine.name == other.name == "epoch=1-step=4.ckpt"
    # The notebook's load_from_checkpoint: encoder_class=Encoder, saved as its text, rebuilt with the
    # default (Lightning 2.6 refuses its own file there, which pickles the class).
    assert_same_weights(ours["best"], theirs["model"])
    assert ours["best"].hparams["encoder_class"] is type(ours["model"].encoder)
    written, expected = event_values(Path(ours["trainer"].log_dir)), event_values(Path(theirs["trainer"].log_dir))
    assert [f["graph"] for f in expected["files"]] == [True, True, True]
    assert written == expected


# ------------------------------------------------------------------------ 09: normalizing flows
def test_normalizing_flow(tmp_path: Path) -> None:
    """The flow's forward draws dequantization noise: the model summary's pass over
    `example_input_array` and the graph's trace (at fit and at each test) draw it as Lightning's
    do, so the weights and the importance-sampled test values are Lightning's."""
    ours, theirs = both("uva_flows", tmp_path)
    assert_same_run(ours, theirs, stages=("val", "test"))
    assert ours["val"] == theirs["val"] and ours["test"] == theirs["test"]
    lightnings_values(metrics(ours["trainer"]), metrics(theirs["trainer"]))
    mine, other = ours["trainer"].checkpoint_callback.best_model_path, theirs["trainer"].checkpoint_callback.best_model_path
    assert Path(mine).name == Path(other).name
    # the notebook's way back to a saved flow: torch.load(file)["state_dict"] into a new flow
    assert_same_weights(torch.load(mine, map_location="cpu")["state_dict"], torch.load(other, map_location="cpu")["state_dict"])


def _noisy(framework: Any) -> Any:
    class Noisy(framework.LightningModule):  # type: ignore[name-defined,misc]
        """A forward that draws (as a flow's dequantization), with an example input."""

        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(3, 1)
            self.example_input_array = torch.zeros(2, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.layer(x + torch.rand_like(x))

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return self(batch[0]).pow(2).mean()

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    return Noisy


@pytest.mark.parametrize("summary", ["default", "depth0", "depth2", "off"])
def test_model_summary_runs_the_example_input(summary: str, caplog: pytest.LogCaptureFixture) -> None:
    """The model summary runs `example_input_array` through the module (for its in/out sizes)
    as Lightning's does, unless it is off (`enable_model_summary=False`, `ModelSummary(max_depth=0)`):
    a forward that draws moves the random streams alike, so the weights are Lightning's."""
    import logging

    import lightning as L

    import trainer as ours
    from callbacks import ModelSummary

    weights = {}
    for name, framework in (("ours", ours), ("lightning", L)):
        options: dict[str, Any] = {"enable_model_summary": summary != "off"}
        if summary.startswith("depth"):
            depth = int(summary[-1])
            options["callbacks"] = [ModelSummary(max_depth=depth) if name == "ours" else L.pytorch.callbacks.ModelSummary(max_depth=depth)]
        torch.manual_seed(0)
        model = _noisy(framework)()
        trainer = framework.Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                                    accelerator="cpu", **options)
        with caplog.at_level(logging.INFO, logger="trainer"):
            trainer.fit(model, DataLoader(TensorDataset(torch.randn(4, 3)), batch_size=2))
        weights[name] = copy.deepcopy(model.state_dict())
    assert_same_weights(weights["ours"], weights["lightning"])
    if summary in ("default", "depth2"):
        assert "In sizes" in caplog.text and "[2, 3]" in caplog.text and "[2, 1]" in caplog.text


def test_private_log_graph_names_of_lightning(tmp_path: Path) -> None:
    """`trainer.logger._log_graph = True` and `trainer.logger._default_hp_metric = None`, as
    Lightning's tutorials write them, set the logger's `log_graph` and `default_hp_metric`."""
    from trainer.loggers import TensorBoardLogger

    logger = TensorBoardLogger(tmp_path)
    logger._log_graph = True
    logger._default_hp_metric = None
    assert logger.log_graph_on_start is True and logger._log_graph is True
    assert logger.default_hp_metric is False and logger._default_hp_metric is False


# ------------------------------------------------------------------------ 10: PixelCNN
def test_pixelcnn(tmp_path: Path) -> None:
    """Masked convolutions that mask their weights in place in every forward (the summary's
    pass over the example input included), and samples drawn after `seed_everything(1)`."""
    ours, theirs = both("uva_pixelcnn", tmp_path)
    assert_same_run(ours, theirs, stages=("val", "test"))
    lightnings_values(metrics(ours["trainer"]), metrics(theirs["trainer"]))
    assert torch.equal(ours["samples"], theirs["samples"])
    assert Path(ours["trainer"].checkpoint_callback.best_model_path).name == Path(theirs["trainer"].checkpoint_callback.best_model_path).name


# ------------------------------------------------------------------------ 11: vision transformer
def test_vision_transformer(tmp_path: Path) -> None:
    """Dropout, AdamW with MultiStepLR, the graph traced at fit and at both tests, and the best
    checkpoint (on `val_acc`, mode max) loaded and tested."""
    ours, theirs = both("uva_vit", tmp_path)
    assert_same_run(ours, theirs, stages=("val", "test"))
    lightnings_values(metrics(ours["trainer"]), metrics(theirs["trainer"]))
    same_best(ours, theirs, "ViT")
    assert ours["result"] == theirs["result"]
    written, expected = event_values(Path(ours["trainer"].log_dir)), event_values(Path(theirs["trainer"].log_dir))
    assert [f["graph"] for f in written["files"]] == [f["graph"] for f in expected["files"]] == [True, True, True]


# ------------------------------------------------------------------------ 13: SimCLR
def test_simclr_then_logistic_regression(tmp_path: Path) -> None:
    """SimCLR's two views per image (a list in the batch), its best checkpoint's backbone as the
    features, then a logistic regression validated every 2nd epoch (its checkpoint saved after
    those validations) and tested on the shuffled train loader and the test loader."""
    ours, theirs = both("uva_simclr", tmp_path)
    assert_same_run(ours["simclr"], theirs["simclr"])
    lightnings_values(metrics(ours["simclr"]["trainer"]), metrics(theirs["simclr"]["trainer"]))
    same_best(ours["simclr"], theirs["simclr"], "SimCLR")
    for mine, other in zip(ours["features"], theirs["features"]):
        assert all(torch.equal(a, b) for a, b in zip(mine.tensors, other.tensors))
    assert_same_run(ours, theirs, stages=("test",))
    assert ours["train_test"] == theirs["train_test"] and ours["test"] == theirs["test"]
    same_best(ours, theirs, "LogisticRegression")
    assert Path(theirs["trainer"].checkpoint_callback.best_model_path).name.startswith("epoch=1-")


def test_a_class_given_as_a_hyperparameter_loads_back(tmp_path: Path) -> None:
    """A class or function passed to `__init__` is saved as its text (a checkpoint holds no code):
    `load_from_checkpoint` gives back `__init__`'s default when the text is the default's, and
    says to pass anything else again as an override, before building the module."""
    import trainer as L

    class Net(L.LightningModule):
        def __init__(self, width: int = 2, act: object = torch.nn.ReLU, scale: Any = torch.sigmoid) -> None:
            super().__init__()
            self.save_hyperparameters()
            self.layer = torch.nn.Sequential(torch.nn.Linear(width, width), act())

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return self.layer(batch[0]).sum()

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    for built, expected in ((Net(), None), (Net(act=torch.nn.Tanh), "act"), (Net(scale=torch.tanh), "scale")):
        trainer = L.Trainer(max_steps=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                            enable_model_summary=False, root_dir=tmp_path)
        trainer.fit(built, DataLoader(TensorDataset(torch.randn(2, 2)), batch_size=2))
        path = tmp_path / "net.ckpt"
        trainer.save_checkpoint(path)
        if expected is None:
            loaded = Net.load_from_checkpoint(path)
            assert loaded.hparams["act"] is torch.nn.ReLU and loaded.hparams["scale"] is torch.sigmoid
            assert_same_weights(loaded, built)
        else:
            with pytest.raises(ValueError, match=f"Net.load_from_checkpoint\\(path, {expected}=...\\)"):
                Net.load_from_checkpoint(path)
            loaded = Net.load_from_checkpoint(path, **{expected: built.hparams[expected]})
            assert_same_weights(loaded, built)


def test_a_step_that_needs_gradients_under_inference_mode_says_what_to_write(tmp_path: Path) -> None:
    """ProtoMAML's validation_step fine-tunes: in `trainer.validate` with the default
    `inference_mode=True` it fails under Lightning too; here the error says to write
    `Trainer(inference_mode=False)`, and with it the values are Lightning's."""
    import lightning as L

    from tests.helpers.lightning_projects import load_project

    values = {}
    for name, framework in (("ours", "ours"), ("lightning", "lightning")):
        project = load_project("uva_meta", framework)
        result = project.main(tmp_path / f"{name}_fit", model="protomaml", max_epochs=1)
        model, trainer = result["model"], result["trainer"]
        loader = trainer.val_dataloaders
        with pytest.raises(RuntimeError, match="Trainer\\(inference_mode=False\\)" if name == "ours" else "grad"):
            trainer.validate(model, loader, verbose=False)
        other = (project.pl.Trainer if name == "ours" else L.Trainer)(
            inference_mode=False, accelerator="cpu", logger=False, enable_progress_bar=False, default_root_dir=tmp_path / name)
        values[name] = other.validate(model, loader, verbose=False)[0]
    assert values["ours"] == values["lightning"]
