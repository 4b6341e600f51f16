"""Metric names and metric dicts as Lightning keeps them, compared in this process.

- A name the user logs is the user's: `train/loss` logged per epoch is written and monitored
  under `train/loss` (the Trainer's own per-step `train/loss` steps aside), so
  `ModelCheckpoint(monitor="train/loss")` and `EarlyStopping` watch the epoch mean, as in Lightning.
- `test()`/`validate()` start a new `callback_metrics` dict: one held since `fit` keeps fit's values.
- `LearningRateMonitor.lrs` has a key per tag (an empty list) from the start of training.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.helpers.lightning_projects import lightning_source

pytest.importorskip("lightning")

SOURCE = textwrap.dedent('''
    import torch
    import torch.nn.functional as F
    from torch.utils.data import DataLoader, TensorDataset

    import trainer as L
    from callbacks import EarlyStopping, LearningRateMonitor, ModelCheckpoint
    from trainer.loggers import CSVLogger


    class Regressor(L.LightningModule):
        def __init__(self, on_step=False, lr=0.05):
            super().__init__()
            self.save_hyperparameters()
            self.net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = F.mse_loss(self.net(x), y)
            self.log("train/loss", loss, on_step=self.hparams.on_step, on_epoch=True)
            return loss

        def validation_step(self, batch, batch_idx):
            x, y = batch
            self.log("val/loss", F.mse_loss(self.net(x), y))

        def test_step(self, batch, batch_idx):
            x, y = batch
            self.log("test/loss", F.mse_loss(self.net(x), y))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


    class Probe(L.Callback):
        def __init__(self, monitor):
            self.monitor, self.lrs_at_start, self.seen = monitor, None, []

        def on_train_start(self, trainer, pl_module):
            self.lrs_at_start = {k: list(v) for k, v in self.monitor.lrs.items()}

        def on_train_epoch_end(self, trainer, pl_module):
            self.seen.append(float(trainer.callback_metrics["train/loss"]))


    def main(root, on_step=False, patience=1):
        L.seed_everything(7)
        x = torch.randn(48, 4)
        y = x.sum(1, keepdim=True) + 0.1 * torch.randn(48, 1)
        data = TensorDataset(x, y)
        model = Regressor(on_step=on_step)
        checkpoint = ModelCheckpoint(dirpath=f"{root}/checkpoints", monitor="train/loss", save_top_k=2, filename="{epoch}")
        stop = EarlyStopping(monitor="train/loss", patience=patience, min_delta=0.5)
        monitor = LearningRateMonitor()
        probe = Probe(monitor)
        fit = L.Trainer(max_epochs=5, callbacks=[checkpoint, stop, monitor, probe], log_every_n_steps=2,
                        logger=CSVLogger(root, name="csv"), enable_progress_bar=False, enable_model_summary=False,
                        deterministic=True)
        fit.fit(model, DataLoader(data, batch_size=8, shuffle=True), DataLoader(data, batch_size=16))
        held = fit.callback_metrics
        after_fit = {k: float(v) for k, v in held.items()}
        fit.test(model, DataLoader(data, batch_size=16), verbose=False)
        return {"model": model, "trainer": fit, "checkpoint": checkpoint, "stop": stop, "probe": probe, "monitor": monitor,
                "held": {k: float(v) for k, v in held.items()}, "after_fit": after_fit,
                "after_test": {k: float(v) for k, v in fit.callback_metrics.items()}}
''')


def run(framework: str, root: Path, **options: Any) -> dict[str, Any]:
    source = SOURCE if framework == "ours" else lightning_source(SOURCE)
    namespace: dict[str, Any] = {"__name__": f"_metric_names_{framework}"}
    exec(compile(source, f"<metric names {framework}>", "exec"), namespace)
    return namespace["main"](str(root / framework), **options)  # type: ignore[no-any-return]


@pytest.fixture(params=[False, True], ids=["epoch_only", "step_and_epoch"])
def runs(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    return run("ours", tmp_path, on_step=request.param), run("lightning", tmp_path, on_step=request.param)


def test_a_user_train_loss_is_what_monitors_watch(runs: tuple[dict[str, Any], dict[str, Any]], tmp_path: Path) -> None:
    ours, theirs = runs
    mine, other = ours["model"].state_dict(), theirs["model"].state_dict()
    assert all(torch.equal(mine[k], other[k]) for k in other)
    assert ours["trainer"].current_epoch == theirs["trainer"].current_epoch
    assert ours["stop"].stopped_epoch == theirs["stop"].stopped_epoch
    assert ours["probe"].seen == theirs["probe"].seen  # callback_metrics["train/loss"]: the epoch mean
    assert float(ours["checkpoint"].best_model_score) == float(theirs["checkpoint"].best_model_score)
    assert ({Path(p).name: float(v) for p, v in ours["checkpoint"].best_k_models.items()}
            == {Path(p).name: float(v) for p, v in theirs["checkpoint"].best_k_models.items()})
    assert sorted(p.name for p in (tmp_path / "ours" / "checkpoints").iterdir()) == \
        sorted(p.name for p in (tmp_path / "lightning" / "checkpoints").iterdir())
    expected = theirs["after_fit"]
    assert {k: ours["after_fit"].get(k) for k in expected} == expected
    assert "train/loss_epoch" not in ours["after_fit"] or "train/loss_epoch" in expected
    logged = {k: float(v) for k, v in theirs["trainer"].logged_metrics.items() if k.startswith("train/loss")}
    assert {k: ours["trainer"].logged_metrics.get(k) for k in logged} == logged


def test_callback_metrics_held_since_fit_keep_fits_values(runs: tuple[dict[str, Any], dict[str, Any]]) -> None:
    ours, theirs = runs
    assert theirs["held"] == theirs["after_fit"] and "test/loss" in theirs["after_test"]
    assert ours["held"] == ours["after_fit"]
    assert ours["after_test"] == theirs["after_test"]


def test_learning_rate_monitor_has_its_tags_from_the_start(runs: tuple[dict[str, Any], dict[str, Any]]) -> None:
    ours, theirs = runs
    assert theirs["probe"].lrs_at_start == {"lr-SGD": []}
    assert ours["probe"].lrs_at_start == theirs["probe"].lrs_at_start
    assert ours["monitor"].lrs == theirs["monitor"].lrs


RUNS = textwrap.dedent('''
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    import trainer as L


    class Model(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            loss = self.layer(batch[0]).pow(2).mean()
            self.log("loss", loss)
            return loss

        def validation_step(self, batch, batch_idx):
            self.log("val", self.layer(batch[0]).sum())

        def predict_step(self, batch, batch_idx):
            return self.layer(batch[0])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)


    class Hold(L.Callback):
        def __init__(self):
            self.held = {}

        def on_sanity_check_end(self, trainer, pl_module):
            self.held.setdefault("sanity", trainer.callback_metrics)

        def on_train_start(self, trainer, pl_module):
            self.held.setdefault("train_start", trainer.callback_metrics)


    def main():
        loader = DataLoader(TensorDataset(torch.ones(4, 2)), batch_size=2)
        hold = Hold()
        fit = L.Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, callbacks=[hold])
        model = Model()
        fit.fit(model, loader, loader)
        after_fit = fit.callback_metrics
        fit.predict(model, loader)
        after_predict = fit.callback_metrics
        fit.validate(model, loader, verbose=False)
        after_validate = fit.callback_metrics
        held = dict(hold.held, after_fit=after_fit, after_predict=after_predict, after_validate=after_validate)
        names = list(held)
        return {"same": [[held[a] is held[b] for b in names] for a in names],
                "values": {k: sorted(v) for k, v in held.items()}}
''')


def test_each_run_starts_a_new_callback_metrics_dict() -> None:
    """Lightning: fit (and again after its sanity check), validate, test and predict each start a
    new, empty dict; a reference held earlier keeps what it had (the fit's after predict)."""
    results = {}
    for framework in ("ours", "lightning"):
        source = RUNS if framework == "ours" else lightning_source(RUNS)
        namespace: dict[str, Any] = {"__name__": f"_runs_{framework}"}
        exec(compile(source, f"<runs {framework}>", "exec"), namespace)
        results[framework] = namespace["main"]()
    ours, theirs = results["ours"], results["lightning"]
    assert ours["same"] == theirs["same"]
    assert theirs["values"]["after_predict"] == [] and theirs["values"]["after_fit"] == ["loss", "val"]
    assert {k: [n for n in v if not n.startswith("train/")] for k, v in ours["values"].items()} == theirs["values"]
