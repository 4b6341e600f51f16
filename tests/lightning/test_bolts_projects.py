"""Lightning Bolts' models and callbacks (Lightning-Universe/lightning-bolts), written by others
for Lightning, trained here with only their imports changed and compared with Lightning 2.6 in
one process (tests/helpers/lightning_projects/bolts_*.py, each saying what was shrunk and
what Lightning 2 itself needed changed): weights, steps and epochs, the metrics Lightning
reports, what `trainer.test` returns, what the callbacks print, warn, raise and write to
TensorBoard, and the checkpoint files. All equal with `torch.equal` or `==`.

Next to them, what these projects found different before, checked on its own against
Lightning: per-step values logged during an evaluation are never `callback_metrics` (and
`callback_metrics` lists `name` before `name_step`/`name_epoch`, as a table printed from it
shows); gradients a callback makes before training (bolts' BatchGradientVerification runs a
backward in `on_train_start`) never reach the first optimizer step.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.helpers.lightning_projects import assert_same_run, both, lightnings_values, load_source

pytest.importorskip("lightning")
EventAccumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator").EventAccumulator


def floats(metrics: dict[str, Any]) -> dict[str, float]:
    return {key: float(value) for key, value in metrics.items()}


def users(metrics: dict[str, Any]) -> dict[str, Any]:
    """The metrics the module logged: without the Trainer's own `train/...` scalars, which
    `callback_metrics` holds here too (docs/lightning.md)."""
    return {key: value for key, value in metrics.items() if not key.startswith("train/")}


# =================================================================== regression + PrintTableMetricsCallback
@pytest.mark.parametrize("model", ["logistic", "linear"])
def test_regression_models_and_the_metrics_table(tmp_path: Path, model: str) -> None:
    """LogisticRegression (l1 and l2 strengths, torchmetrics accuracy, values logged per step and
    per epoch in validation) and LinearRegression (a training step returning bolts' old
    `{"loss", "log", "progress_bar"}` dict), with PrintTableMetricsCallback."""
    ours, theirs = both("bolts_regression", tmp_path, model=model)
    assert_same_run(ours, theirs)
    lightnings_values(floats(ours["val"]), floats(theirs["val"])) if theirs["val"] else None
    assert floats(users(ours["val"])) == floats(theirs["val"])  # nothing more, nothing less, in Lightning's order
    assert list(users(ours["val"])) == list(theirs["val"])
    assert floats(ours["test"]) == floats(theirs["test"]) and list(ours["test"]) == list(theirs["test"])
    # The table the callback printed at each epoch end: Lightning's, once the Trainer's own
    # train/ columns are left out (the callback prints every callback metric).
    table_module = __import__(type(ours["table"]).__module__)
    mine = [users(row) for row in ours["table"].metrics]
    printed = [table_module.dicts_to_table(mine[: i + 1]) if mine[0] else "" for i in range(len(mine))]
    expected = [text if theirs["table"].metrics[0] else "" for text in theirs["table"].printed]
    assert printed == expected and len(printed) == 2
    # Checkpoints: the Trainer's last.ckpt in its run folder (Lightning's epoch=N-step=M.ckpt
    # under lightning_logs/: a deliberate difference, docs/lightning.md).
    assert theirs["checkpoints"] == ["lightning_logs/version_0/checkpoints/epoch=1-step=12.ckpt"]
    assert ours["checkpoints"] == ["default/version_0/last.ckpt"]
    # The optimizer class is a hyperparameter: load_from_checkpoint gives it back here; Lightning's
    # refuses the file under torch's weights_only loading unless told weights_only=False.
    cls, theirs_cls = type(ours["model"]), type(theirs["model"])
    mine = cls.load_from_checkpoint(tmp_path / "ours" / ours["checkpoints"][0])
    lightnings = theirs_cls.load_from_checkpoint(tmp_path / "lightning" / theirs["checkpoints"][0], weights_only=False)
    assert mine.optimizer is lightnings.optimizer is torch.optim.Adam and mine.hparams == lightnings.hparams
    assert_same_run({"model": mine, "trainer": ours["trainer"]}, {"model": lightnings, "trainer": theirs["trainer"]})


_EVAL_STEPS = '''
import torch
from torch.utils.data import DataLoader
import trainer as L
from trainer.demos.boring_classes import BoringModel

class Model(BoringModel):
    def training_step(self, batch, batch_idx):
        out = super().training_step(batch, batch_idx)
        self.log("loss", out["loss"], on_step=True, on_epoch=True)
        return out

    def validation_step(self, batch, batch_idx):
        value = torch.tensor(float(batch_idx))
        self.log("v/step", value, on_step=True, on_epoch=False, prog_bar=True)
        self.log("v/both", value, on_step=True, on_epoch=True, prog_bar=True)
        self.log("v/epoch", value + 1)

    def on_validation_batch_end(self, *args):
        self.during.append(list(self.trainer.callback_metrics))

def main(root, stage):
    L.seed_everything(0)
    model = Model()
    model.during = []
    trainer = L.Trainer(default_root_dir=root, accelerator="cpu", logger=False, enable_progress_bar=False,
                        enable_model_summary=False, enable_checkpointing=False, max_epochs=1,
                        limit_train_batches=2, limit_val_batches=2, num_sanity_val_steps=0)
    data = DataLoader(torch.randn(8, 32), batch_size=2)
    if stage == "fit":
        trainer.fit(model, data, data)
    else:
        trainer.validate(model, data, verbose=False)
    return model.during, dict(trainer.callback_metrics), dict(trainer.progress_bar_metrics)
'''


@pytest.mark.parametrize("stage", ["fit", "validate"])
def test_evaluation_step_values_are_never_callback_metrics(tmp_path: Path, stage: str) -> None:
    """Values logged per step in `validation_step` go to the loggers and the progress bar, never
    to `callback_metrics` (Lightning's rule: a callback reading it mid-validation sees the
    training values only); and `callback_metrics` lists each name before its `_step`/`_epoch`
    twin, in the order first logged."""
    ours, theirs = (load_source(_EVAL_STEPS, framework, "eval_steps").main(tmp_path / framework, stage)
                    for framework in ("ours", "lightning"))
    during, final, bar = ours
    # (during fit the training epoch has closed before its validation here, so its `loss_epoch`
    # is there too: a deliberate difference, docs/lightning.md)
    closed = {"loss_epoch"} if stage == "fit" else set()
    assert [[name for name in users(dict.fromkeys(names)) if name not in closed] for names in during] == theirs[0]
    assert len(during) == 2
    assert [name for name in users(final) if name not in closed] == [name for name in theirs[1] if name not in closed]
    assert floats(users(final)) == floats(theirs[1])
    assert "v/step" not in final and "v/both_step" not in final
    assert bar["v/both_step"] == theirs[2]["v/both_step"] and bar["v/step"] == theirs[2]["v/step"]


# =================================================================== data monitors + batch gradient verification
def histograms(run_dir: Path) -> dict[str, list[tuple[int, Any]]]:
    out: dict[str, list[tuple[int, Any]]] = {}
    for path in sorted(run_dir.glob("events.out.tfevents.*")):
        events = EventAccumulator(str(path), size_guidance={"histograms": 0}).Reload()
        for tag in events.Tags()["histograms"]:
            out.setdefault(tag, []).extend((event.step, event.histogram_value) for event in events.Histograms(tag))
    return out


def test_data_monitors_and_batch_gradient_verification(tmp_path: Path) -> None:
    """ModuleDataMonitor(submodules=True) and TrainingDataMonitor write the same histograms
    (tags, steps, buckets) to TensorBoard; BatchGradientVerificationCallback's backward in
    `on_train_start` leaves gradients that neither framework lets into the first step."""
    ours, theirs = both("bolts_callbacks", tmp_path)
    assert_same_run(ours, theirs)
    assert floats(users(ours["val"])) == floats(theirs["val"])
    mine, lightnings = histograms(ours["log_dir"]), histograms(theirs["log_dir"])
    assert len(lightnings) == 15 and "training_step/0/[8, 6]" in lightnings and "output/head/[8, 1]" in lightnings
    assert mine == lightnings


def test_batch_gradient_verification_reports_a_model_that_mixes_the_batch(tmp_path: Path) -> None:
    """A model mixing samples of its batch: the callback warns in both (the same message), or
    raises its RuntimeError before any step with `error=True`."""
    messages = {}
    for framework in ("ours", "lightning"):
        project = load_source(Path(__file__).parents[1].joinpath("helpers/lightning_projects/bolts_callbacks.py").read_text(),
                              framework, "bolts_callbacks")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            project.main(tmp_path / framework, mix=True, max_steps=1, limit_val_batches=0)
        messages[framework] = [str(w.message) for w in caught if "mixing data across the batch" in str(w.message)]
        with pytest.raises(RuntimeError, match="mixing data across the batch dimension") as raised:
            project.main(tmp_path / f"{framework}-error", mix=True, error=True)
        assert raised.value is not None
    assert messages["ours"] == messages["lightning"] and len(messages["ours"]) == 1


_HOOK_BACKWARD = '''
import torch
from torch.utils.data import DataLoader
import trainer as L
from trainer.demos.boring_classes import BoringModel

class Probe(L.Callback):
    """Makes gradients outside any step, as a checking callback does."""
    def on_train_start(self, trainer, module):
        module(torch.ones(4, 32)).sum().backward()

    def on_train_epoch_start(self, trainer, module):
        (module(torch.ones(4, 32)) ** 2).sum().backward()

def main(root, accumulate):
    L.seed_everything(0)
    model = BoringModel()
    trainer = L.Trainer(default_root_dir=root, accelerator="cpu", logger=False, enable_progress_bar=False,
                        enable_model_summary=False, enable_checkpointing=False, max_epochs=2,
                        limit_train_batches=3, limit_val_batches=0, accumulate_grad_batches=accumulate,
                        callbacks=[Probe()])
    trainer.fit(model, DataLoader(torch.randn(12, 32, generator=torch.Generator().manual_seed(1)), batch_size=2))
    return model
'''


@pytest.mark.parametrize("accumulate", [1, 3])
def test_gradients_a_callback_makes_before_training_never_reach_a_step(tmp_path: Path, accumulate: int) -> None:
    """Gradients made in `on_train_start` / `on_train_epoch_start` are released before the
    epoch's first backward, as Lightning's zero_grad releases them; the weights are Lightning's
    and a hand-written loop's that zeroes before each window."""
    ours, theirs = (load_source(_HOOK_BACKWARD, framework, "hook_backward").main(tmp_path / framework, accumulate)
                    for framework in ("ours", "lightning"))
    from lightning.pytorch.demos.boring_classes import BoringModel

    torch.manual_seed(0)
    by_hand = BoringModel()
    optimizer = torch.optim.SGD(by_hand.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)  # BoringModel's
    data = torch.randn(12, 32, generator=torch.Generator().manual_seed(1)).split(2)[:3]
    for _ in range(2):
        optimizer.zero_grad()
        for i, batch in enumerate(data):
            out = by_hand(batch)
            (torch.nn.functional.mse_loss(out, torch.ones_like(out)) / accumulate).backward()
            if (i + 1) % accumulate == 0:
                optimizer.step()
                optimizer.zero_grad()
        scheduler.step()
    for mine, lightnings, hand in zip(ours.parameters(), theirs.parameters(), by_hand.parameters()):
        assert torch.equal(mine, lightnings) and torch.equal(mine, hand)


# =================================================================== SSLOnlineEvaluator, resumed
def test_ssl_online_evaluator_trains_and_resumes_exactly(tmp_path: Path) -> None:
    """The callback's own classifier (its Adam, its backward in `on_train_batch_end`, its
    values logged from callback hooks) trains to Lightning's weights; resumed from a checkpoint
    by a new module, callback and Trainer, the run is the uninterrupted one, although the
    callback builds a new classifier in `on_fit_start` (drawing its initial weights) before
    its state comes back. (Lightning's resume continues with the new process's random
    streams instead: a deliberate difference, docs/lightning.md, so the resumed runs are
    compared with the uninterrupted ones.)"""
    from tests.helpers.lightning_projects import assert_same_weights, run

    ours = run("bolts_ssl_online", "ours", tmp_path / "resumed")
    whole, theirs_whole = (run("bolts_ssl_online", framework, tmp_path / "whole", resume=False) for framework in ("ours", "lightning"))
    assert_same_run(whole, theirs_whole)
    assert_same_weights(whole["evaluator"], theirs_whole["evaluator"])
    assert floats(users(whole["val"])) == floats(theirs_whole["val"])
    assert whole["optimizer"].state_dict()["state"][0]["step"] == theirs_whole["optimizer"].state_dict()["state"][0]["step"] == 12
    assert_same_run(ours, whole)
    assert floats(users(ours["val"])) == floats(users(whole["val"]))
    # The classifier's parameters too; its BatchNorm statistics not: the callback runs it in
    # train mode in validation, so the resumed fit's sanity check moves them (in Lightning too).
    for (name, mine), (_, uninterrupted) in zip(ours["evaluator"].named_parameters(), whole["evaluator"].named_parameters()):
        assert torch.equal(mine, uninterrupted), name
    assert ours["optimizer"].state_dict()["state"][0]["step"] == 12


def test_accelerator_connector_answers_is_distributed(tmp_path: Path) -> None:
    """`trainer._accelerator_connector.is_distributed` (Lightning's private connector, read by
    callbacks written for Lightning) answers as Lightning's; any other attribute says what
    to read instead."""
    import lightning

    import trainer as L

    ours = L.Trainer(default_root_dir=tmp_path, accelerator="cpu", logger=False)
    theirs = lightning.Trainer(default_root_dir=tmp_path, accelerator="cpu", logger=False)
    assert ours._accelerator_connector.is_distributed is theirs._accelerator_connector.is_distributed is False
    with pytest.raises(AttributeError, match=r"_accelerator_connector.use_ddp.*trainer.strategy"):
        ours._accelerator_connector.use_ddp


class _DrawingCallback:
    """Draws from torch's stream before training, as a callback building its own model does."""

    def on_fit_start(self, trainer: Any, module: Any) -> None:
        torch.randn(5)

    def on_train_start(self, trainer: Any, module: Any) -> None:
        torch.rand(3)


def test_draws_before_training_do_not_shift_a_resumed_run(tmp_path: Path) -> None:
    """A resume at an epoch's start, by a Trainer whose callbacks draw random numbers in
    `on_fit_start`/`on_train_start`, trains as the uninterrupted run (dropout and shuffling
    draw from the streams the checkpoint restored, after those hooks)."""
    import trainer as L
    from torch.utils.data import DataLoader, TensorDataset

    class Net(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.5), torch.nn.Linear(8, 1))

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1])

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    data = TensorDataset(torch.randn(24, 4, generator=torch.Generator().manual_seed(0)), torch.randn(24, 1, generator=torch.Generator().manual_seed(1)))

    def fit(epochs: int, folder: str, ckpt: Path | None = None) -> tuple[Any, Any]:
        torch.manual_seed(0)
        model = Net()
        callback = type("Drawing", (_DrawingCallback, L.Callback), {})()
        trainer = L.Trainer(default_root_dir=tmp_path / folder, accelerator="cpu", max_epochs=epochs, logger=False,
                            enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False, callbacks=[callback])
        trainer.fit(model, DataLoader(data, batch_size=6, shuffle=True), ckpt_path=ckpt)
        return model, trainer

    model, first = fit(2, "first")
    first.save_checkpoint(tmp_path / "two.ckpt")
    resumed, _ = fit(3, "resumed", tmp_path / "two.ckpt")
    whole, _ = fit(3, "whole")
    for mine, uninterrupted in zip(resumed.parameters(), whole.parameters()):
        assert torch.equal(mine, uninterrupted)


# =================================================================== VanillaPolicyGradient
def test_vanilla_policy_gradient_plays_inside_its_loader(tmp_path: Path) -> None:
    """Episodes played by the policy inside the loader's IterableDataset, while it trains: the
    same episodes, rewards, steps and weights. Lightning reads one batch ahead of the step it
    trains (its loader has no length), so when `max_steps` stops it, it has played one more
    episode that nothing trained on; here each batch is read just before its step (a
    deliberate difference, docs/lightning.md)."""
    from tests.helpers.lightning_projects import assert_same_weights

    ours, theirs = both("bolts_vpg", tmp_path, max_steps=20)
    assert_same_weights(ours["model"], theirs["model"])
    assert ours["trainer"].global_step == theirs["trainer"].global_step == 20
    # the stop inside the (endless) epoch: Lightning counts that epoch as done (docs/lightning.md)
    assert ours["trainer"].current_epoch + 1 == theirs["trainer"].current_epoch == 1
    assert users(ours["val"]) == theirs["val"] == {}
    assert ours["episodes"] == 5 and theirs["episodes"] == 6
    assert ours["rewards"] == theirs["rewards"][:5]


_CALLBACK_EPOCH_LOG = '''
import torch
from torch.utils.data import DataLoader
import trainer as L
from trainer.demos.boring_classes import BoringModel

class Accuracy(L.Callback):
    """Logs a value computed over the whole evaluation, as bolts' KNNOnlineEvaluator does."""
    def on_validation_epoch_end(self, trainer, module):
        module.log("callback_acc", 0.25 + trainer.current_epoch, on_step=False, on_epoch=True)

class Model(BoringModel):
    def validation_step(self, batch, batch_idx):
        self.log("val_loss", self.step(batch))

def main(root):
    L.seed_everything(0)
    trainer = L.Trainer(default_root_dir=root, accelerator="cpu", logger=False, enable_progress_bar=False,
                        enable_model_summary=False, enable_checkpointing=False, max_epochs=2, limit_train_batches=2,
                        limit_val_batches=2, callbacks=[Accuracy()])
    data = DataLoader(torch.randn(8, 32), batch_size=2)
    model = Model()
    trainer.fit(model, data, data)
    fitted = dict(trainer.callback_metrics)
    return fitted, trainer.validate(model, data, verbose=False)[0]
'''


def test_values_a_callback_logs_at_an_evaluation_end_are_kept(tmp_path: Path) -> None:
    """`pl_module.log` in a callback's `on_validation_epoch_end` is in `callback_metrics` after
    `fit` and in what `validate` returns, as in Lightning (it was dropped: the epoch had closed)."""
    (fitted, validated), (theirs_fitted, theirs_validated) = (
        load_source(_CALLBACK_EPOCH_LOG, framework, "callback_epoch_log").main(tmp_path / framework) for framework in ("ours", "lightning"))
    assert theirs_fitted["callback_acc"] == 1.25 and theirs_validated["callback_acc"] == 2.25
    assert floats(users(fitted)) == floats(theirs_fitted)
    assert floats(validated) == floats(theirs_validated)


_VALIDATION_BACKWARD = '''
import torch
from torch.utils.data import DataLoader
import trainer as L
from trainer.demos.boring_classes import BoringModel

class Saliency(L.Callback):
    """A backward of its own at each validation's end (a saliency map), mid-epoch too."""
    def on_validation_epoch_end(self, trainer, module):
        with torch.inference_mode(False), torch.enable_grad():
            module(torch.ones(4, 32)).pow(2).sum().backward()

def main(root):
    L.seed_everything(0)
    model = BoringModel()
    trainer = L.Trainer(default_root_dir=root, accelerator="cpu", logger=False, enable_progress_bar=False,
                        enable_model_summary=False, enable_checkpointing=False, max_epochs=2, limit_train_batches=4,
                        limit_val_batches=1, val_check_interval=2, num_sanity_val_steps=0, callbacks=[Saliency()])
    data = DataLoader(torch.randn(8, 32, generator=torch.Generator().manual_seed(1)), batch_size=2)
    trainer.fit(model, data, data)
    return model
'''


def test_gradients_a_callback_makes_in_a_validation_never_reach_a_step(tmp_path: Path) -> None:
    """A callback's own backward at the end of a validation inside an epoch
    (`val_check_interval`): its gradients are released before the next step, as Lightning's
    zero_grad releases them; the weights are Lightning's."""
    from tests.helpers.lightning_projects import assert_same_weights

    ours, theirs = (load_source(_VALIDATION_BACKWARD, framework, "validation_backward").main(tmp_path / framework)
                    for framework in ("ours", "lightning"))
    assert_same_weights(ours, theirs)
