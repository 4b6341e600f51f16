"""Several evaluation loaders against Lightning, in one process: the `eval_loaders` project
(validation on a list of two loaders every second epoch with a sanity check and a limit, a
DataModule's dict of three test loaders, predict from two loaders with a prediction writer)
trains to Lightning's weights, reports Lightning's metrics under Lightning's names, calls every
evaluation hook in Lightning's order with Lightning's arguments, and ModelCheckpoint, monitoring
one loader's metric, keeps the same file. Then what only this Trainer promises: a checkpoint
written in the middle of the second loader's validation resumes exactly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from tests.helpers.lightning_projects import assert_same_metrics, assert_same_weights, both

pytest.importorskip("lightning")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, Any]]:
    return both("eval_loaders", tmp_path_factory.mktemp("eval_loaders"))


def test_weights_and_metrics_are_lightnings(runs: tuple[dict[str, Any], dict[str, Any]]) -> None:
    ours, theirs = runs
    assert_same_weights(ours["model"], theirs["model"])
    assert ours["trainer"].global_step == theirs["trainer"].global_step
    assert {"val_loss/dataloader_idx_0", "val_loss/dataloader_idx_1", "val_mae_epoch/dataloader_idx_1",
            "val_max_0", "val_epochs_seen"} <= set(theirs["val"])
    assert_same_metrics(ours["val"], theirs["val"])
    extra = set(ours["val"]) - set(theirs["val"])  # the Trainer's own scalars, and the last step's values
    assert all(name.startswith("train/") or "_step/dataloader_idx_" in name for name in extra), extra
    assert ours["num_val_batches"] == theirs["num_val_batches"] == [3, 2]  # limit_val_batches per loader


def test_test_results_are_one_dict_per_loader(runs: tuple[dict[str, Any], dict[str, Any]]) -> None:
    ours, theirs = runs
    assert len(theirs["test"]) == 3
    assert ours["test"] == [{k: float(v) for k, v in d.items()} for d in theirs["test"]]
    assert list(ours["test"][2]) == ["test_loss/dataloader_idx_2", "test_done"]  # the loader's, then the epoch hook's
    assert_same_metrics(ours["test_metrics"], theirs["test_metrics"])
    assert set(ours["test_metrics"]) == set(theirs["test_metrics"])
    assert ours["num_test_batches"] == theirs["num_test_batches"] == [3, 3, 2]


def test_predictions_and_writer_per_loader(runs: tuple[dict[str, Any], dict[str, Any]]) -> None:
    ours, theirs = runs
    assert len(ours["predictions"]) == len(theirs["predictions"]) == 2
    for mine, other in zip(ours["predictions"], theirs["predictions"], strict=True):
        assert len(mine) == len(other) == 2  # limit_predict_batches=2 per loader
        assert all(torch.equal(a, b) for a, b in zip(mine, other, strict=True))
    assert ours["writer"] == theirs["writer"]
    assert {index for _, _, index, _ in ours["writer"][0]} == {0, 1}  # write_on_batch_end's dataloader_idx
    assert ours["num_predict_batches"] == theirs["num_predict_batches"] == [2, 2]


def test_hooks_are_called_in_lightnings_order_with_its_arguments(runs: tuple[dict[str, Any], dict[str, Any]]) -> None:
    ours, theirs = runs
    assert ours["calls"] == theirs["calls"]
    steps = [call for call in ours["calls"] if call[:2] == ("step", "validation")]
    assert {call[3] for call in steps} == {0, 1}  # check_val_every_n_epoch=2 keeps dataloader_idx
    starts = [call for call in ours["calls"] if call[:2] == ("callback", "on_test_batch_start")]
    assert {len(call) for call in starts} == {5}  # batch, batch_idx and dataloader_idx, positionally


def test_checkpoint_monitoring_one_loader_keeps_lightnings_file(runs: tuple[dict[str, Any], dict[str, Any]]) -> None:
    ours, theirs = runs
    assert ours["best"] == theirs["best"] and ours["files"] == theirs["files"]
    assert ours["score"] == theirs["score"]


# ----------------------------------------------------------------------------- resume
def _regression(seed: int, n: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 3, generator=g)
    return TensorDataset(x, x.sum(-1, keepdim=True))


def _fit_two_val_loaders(root: Path, *, save_at: Path | None = None, resume: Path | None = None) -> tuple[Any, dict[str, float]]:
    from trainer import Callback, Module, Trainer

    class Net(Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(3, 1)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1])

        def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
            noise = torch.rand(())  # validation draws from the random streams, as a user's loop does
            self.log("val_loss", torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1]) + noise)

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.05)

    class SaveMidValidation(Callback):
        def on_validation_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int,
                                    dataloader_idx: int = 0) -> None:
            if save_at is not None and trainer.current_epoch == 1 and dataloader_idx == 1 and batch_idx == 0:
                trainer.save_checkpoint(save_at)
                raise KeyboardInterrupt  # the job dies right after the save

    torch.manual_seed(0)
    model = Net()
    trainer = Trainer(max_epochs=3, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                      root_dir=str(root), callbacks=[SaveMidValidation()], num_sanity_val_steps=0)
    val = [DataLoader(_regression(1, 8), batch_size=4), DataLoader(_regression(2, 8), batch_size=4, shuffle=True)]
    try:
        trainer.fit(model, DataLoader(_regression(0, 24), batch_size=4, shuffle=True), val, ckpt_path=resume)
    except KeyboardInterrupt:
        pass
    return model, {k: v for k, v in trainer.callback_metrics.items() if k.startswith("val_loss")}


def test_a_checkpoint_written_during_the_second_loaders_validation_resumes_exactly(tmp_path: Path) -> None:
    whole, whole_metrics = _fit_two_val_loaders(tmp_path / "whole")
    saved = tmp_path / "mid_validation.ckpt"
    _fit_two_val_loaders(tmp_path / "cut", save_at=saved)
    assert saved.exists()
    resumed, resumed_metrics = _fit_two_val_loaders(tmp_path / "resumed", resume=saved)
    assert_same_weights(resumed, whole)
    assert set(whole_metrics) == {"val_loss/dataloader_idx_0", "val_loss/dataloader_idx_1"}
    assert resumed_metrics == whole_metrics


_TABLE_PROJECT = '''
import torch
from torch.utils.data import DataLoader, TensorDataset

import trainer as L


class Net(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(3, 1)

    def test_step(self, batch, batch_idx, dataloader_idx=0):
        self.log("test_loss", self.layer(batch[0]).pow(2).mean())
        if dataloader_idx == 1:
            self.log("only_second", 1.0)

    def on_test_epoch_end(self):
        self.log("epoch_end", 2.0)


def main(root):
    torch.manual_seed(0)
    def data(n, seed):
        return DataLoader(TensorDataset(torch.randn(n, 3, generator=torch.Generator().manual_seed(seed))), batch_size=4)
    trainer = L.Trainer(default_root_dir=root, logger=False, enable_progress_bar=False, enable_model_summary=False)
    return trainer.test(Net(), [data(8, 1), data(4, 2)])
'''


def test_the_printed_table_has_a_column_per_loader_as_lightnings(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import lightning.pytorch.loops.evaluation_loop as their_loop

    from tests.helpers.lightning_projects import load_source

    monkeypatch.setattr(their_loop, "_RICH_AVAILABLE", False)  # Lightning's plain-text table, as ours
    printed = []
    for framework in ("ours", "lightning"):
        load_source(_TABLE_PROJECT, framework, "table").main(tmp_path / framework)
        printed.append(capsys.readouterr().out)
    table = printed[0][printed[0].index("─"):]
    assert table == printed[1][printed[1].index("─"):]
    assert "DataLoader 1" in table and "only_second" in table and "/dataloader_idx_" not in table


_EMPTY_PROJECT = '''
import torch
from torch.utils.data import DataLoader, TensorDataset

import trainer as L


class Net(L.LightningModule):
    def __init__(self, calls):
        super().__init__()
        self.layer = torch.nn.Linear(3, 1)
        self.calls = calls

    def training_step(self, batch, batch_idx):
        return self.layer(batch[0]).pow(2).mean()

    def validation_step(self, batch, batch_idx, dataloader_idx=0):
        self.calls.append("validation_step")

    def test_step(self, batch, batch_idx, dataloader_idx=0):
        self.calls.append("test_step")

    def predict_step(self, batch, batch_idx, dataloader_idx=0):
        return batch[0]

    def on_validation_start(self):
        self.calls.append("on_validation_start")

    def on_test_start(self):
        self.calls.append("on_test_start")

    def on_predict_start(self):
        self.calls.append("on_predict_start")

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main(root, empty):
    torch.manual_seed(0)
    calls = []
    train = DataLoader(TensorDataset(torch.randn(8, 3, generator=torch.Generator().manual_seed(1))), batch_size=4)
    trainer = L.Trainer(default_root_dir=root, logger=False, enable_progress_bar=False, enable_model_summary=False,
                        enable_checkpointing=False, max_epochs=2)
    model = Net(calls)
    trainer.fit(model, train, empty)
    results = [trainer.validate(model, empty, verbose=False), trainer.test(model, empty, verbose=False),
               trainer.predict(model, empty)]
    return {"calls": calls, "results": results, "step": trainer.global_step, "model": model}
'''


@pytest.mark.parametrize("empty", [[], {}], ids=["list", "dict"])
def test_an_empty_collection_of_loaders_runs_no_evaluation_as_lightning(tmp_path: Path, empty: Any) -> None:
    """Lightning reads an empty list or dict of evaluation loaders as none: fit trains without
    validating, validate and test return [] and predict None, and no evaluation hook runs."""
    from tests.helpers.lightning_projects import load_source

    ours, theirs = (load_source(_EMPTY_PROJECT, framework, "empty").main(tmp_path / framework, type(empty)())
                    for framework in ("ours", "lightning"))
    assert ours["calls"] == theirs["calls"] == []
    assert ours["results"] == theirs["results"] == [[], [], None]
    assert ours["step"] == theirs["step"] == 4
    assert_same_weights(ours["model"], theirs["model"])


_SHARED_METRIC_PROJECT = '''
import torch
import torchmetrics
from torch.utils.data import DataLoader, TensorDataset

import trainer as L


class Net(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(3, 1)
        self.shared = torchmetrics.MeanMetric()  # one object, logged for both loaders
        self.own = torch.nn.ModuleList([torchmetrics.MeanMetric(), torchmetrics.MeanMetric()])

    def training_step(self, batch, batch_idx):
        return self.layer(batch[0]).pow(2).mean()

    def validation_step(self, batch, batch_idx, dataloader_idx=0):
        loss = self.layer(batch[0]).pow(2).mean()
        self.shared(loss)
        self.own[dataloader_idx](loss)
        self.log("shared", self.shared)
        self.log("own", self.own[dataloader_idx])
        self.log("plain", loss)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main(root):
    torch.manual_seed(0)
    def data(n, seed):
        return DataLoader(TensorDataset(torch.randn(n, 3, generator=torch.Generator().manual_seed(seed))), batch_size=4)
    trainer = L.Trainer(default_root_dir=root, logger=False, enable_progress_bar=False, enable_model_summary=False,
                        enable_checkpointing=False, max_epochs=2, num_sanity_val_steps=0)
    model = Net()
    trainer.fit(model, data(8, 0), [data(8, 1), data(4, 2)])
    fitted = {k: float(v) for k, v in trainer.callback_metrics.items() if not k.startswith("train/")}
    return {"fit": fitted, "validate": trainer.validate(model, [data(8, 1), data(4, 2)], verbose=False), "model": model}
'''


def test_a_metric_object_logged_for_two_loaders_gives_lightnings_values(tmp_path: Path) -> None:
    """Lightning computes what a loader logged when that loader ends, with no reset in between:
    one metric object logged for loaders 0 and 1 reports loader 0's batches under
    `/dataloader_idx_0` and both loaders' batches under `/dataloader_idx_1`; each pass starts
    afresh (the second epoch's values are not mixed with the first's)."""
    pytest.importorskip("torchmetrics")
    from tests.helpers.lightning_projects import load_source

    ours, theirs = (load_source(_SHARED_METRIC_PROJECT, framework, "shared_metric").main(tmp_path / framework)
                    for framework in ("ours", "lightning"))
    assert_same_weights(ours["model"], theirs["model"])
    assert ours["fit"] == theirs["fit"]
    assert ours["validate"] == theirs["validate"]
    for values in (ours["fit"], ours["validate"][0] | ours["validate"][1]):
        first, second = values["plain/dataloader_idx_0"], values["plain/dataloader_idx_1"]  # batches of 4: plain means
        assert values["shared/dataloader_idx_0"] == pytest.approx(first, abs=1e-6)
        assert values["shared/dataloader_idx_1"] == pytest.approx((2 * first + second) / 3, abs=1e-6)
        assert values["own/dataloader_idx_1"] == pytest.approx(second, abs=1e-6)
        assert values["shared/dataloader_idx_1"] != pytest.approx(second, abs=1e-4)
