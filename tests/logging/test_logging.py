"""TensorBoard logging, self.log, callback_metrics, history and the fit summary.

Event files are read back with TensorBoard's own EventAccumulator; every number is
compared with a hand-written PyTorch loop on the same weights and data.
"""

from __future__ import annotations

import ast
import copy
import logging
import math
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from trainer import Callback, Module, TensorBoardLogger, Trainer
from trainer.precision import AMP

pytest.importorskip("tensorboard")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402
from tensorboard.plugins.hparams import metadata as hparams_metadata  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


class Net(Module):
    def __init__(self, hidden: int = 8, lr: float = 0.05, two_groups: bool = False) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(4, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self(x), y)
        self.log("train/mae", (self(x) - y).abs().mean(), on_step=True, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val/loss", torch.nn.functional.mse_loss(self(x), y))

    def configure_optimizers(self):
        hp = self.hparams
        if hp["two_groups"]:
            groups = [{"params": self.net[0].parameters()}, {"params": self.net[2].parameters(), "lr": hp["lr"] / 10}]
            opt = torch.optim.SGD(groups, lr=hp["lr"])
            sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}
        return torch.optim.SGD(self.parameters(), lr=hp["lr"])


def make_data(n: int = 80, seed: int = 1) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g)
    return TensorDataset(x, x.sum(1, keepdim=True).sin() + 0.1 * torch.randn(n, 1, generator=g))


def new_model(**kwargs) -> Net:
    torch.manual_seed(0)
    return Net(**kwargs)


def scalars(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    acc = EventAccumulator(str(run_dir))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def trainer_for(tmp_path: Path, **kwargs) -> Trainer:
    base = dict(root_dir=tmp_path, enable_progress_bar=False, enable_checkpointing=False)
    base.update(kwargs)
    return Trainer(**base)


def reference_loop(model: Net, loader, steps: int, k: int, precision: str = "fp32", init_scale: float = 1024.0, clip: float | None = None):
    """The hand-written loop: per optimizer step, the window loss, grad norm, lrs and scale."""
    setup = model.configure_optimizers()
    opt, sched = (setup["optimizer"], setup["lr_scheduler"]["scheduler"]) if isinstance(setup, dict) else (setup, None)
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale, enabled=precision == "amp")
    records = []
    batches = [b for _ in range(steps * k // len(loader) + 1) for b in loader]
    for step in range(steps):
        window_loss = 0.0
        for x, y in batches[step * k : (step + 1) * k]:
            with torch.autocast("cpu", dtype=torch.float16, enabled=precision == "amp"):
                loss = torch.nn.functional.mse_loss(model(x), y) / k
            scaler.scale(loss).backward()
            window_loss += loss.item()
        scaler.unscale_(opt)
        norm = torch.nn.utils.get_total_norm([p.grad for p in model.parameters()]).item()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        scaler.step(opt)
        scaler.update()
        if sched is not None:
            sched.step()
        opt.zero_grad(set_to_none=True)
        records.append({"loss": window_loss, "norm": norm, "lrs": [g["lr"] for g in opt.param_groups], "scale": scaler.get_scale()})
    return records


def test_automatic_scalars_match_the_hand_written_loop(tmp_path: Path) -> None:
    model = new_model(two_groups=True)
    reference = copy.deepcopy(model)
    data = make_data()
    loader = DataLoader(data, batch_size=4)  # 20 batches, k=2: 10 steps per epoch
    trainer = trainer_for(tmp_path, max_epochs=2, accumulate_grad_batches=2, log_every_n_steps=5)
    trainer.fit(model, loader, DataLoader(data, batch_size=16))
    series = scalars(trainer.log_dir)
    expected = reference_loop(reference, loader, steps=20, k=2)

    for tag in ("train/loss", "train/grad_norm", "train/lr-group0", "train/lr-group1", "train/steps_per_sec", "train/samples_per_sec", "train/mae_step"):
        assert [s for s, _ in series[tag]] == [5, 10, 15, 20], tag
    for (step, value), ref in zip(series["train/loss"], [expected[i - 1] for i in (5, 10, 15, 20)]):
        assert value == pytest.approx(ref["loss"], rel=1e-5), step
    for (step, value) in series["train/grad_norm"]:
        assert value == pytest.approx(expected[step - 1]["norm"], rel=1e-5), step
    for group in (0, 1):
        assert [v for _, v in series[f"train/lr-group{group}"]] == pytest.approx([expected[s - 1]["lrs"][group] for s in (5, 10, 15, 20)])
    # samples/s over steps/s is the samples per optimizer step: batch_size 4 x k 2.
    for (_, samples), (_, steps) in zip(series["train/samples_per_sec"], series["train/steps_per_sec"]):
        assert steps > 0 and samples / steps == pytest.approx(8.0, rel=1e-4)
    assert "train/loss_scale" not in series and "train/skipped_steps" not in series  # fp32: nothing scaled
    # on_step + on_epoch: two series, never one tag; validation: one mean per epoch.
    assert [s for s, _ in series["train/mae_epoch"]] == [10, 20]
    assert [s for s, _ in series["val/loss"]] == [10, 20]
    final = trainer.validate(model, DataLoader(data, batch_size=16))["val/loss"]
    assert series["val/loss"][-1][1] == pytest.approx(final, rel=1e-6)
    with torch.no_grad():
        by_hand = sum(torch.nn.functional.mse_loss(model(x), y).item() for x, y in DataLoader(data, batch_size=16)) / 5
    assert final == pytest.approx(by_hand, rel=1e-6)


def test_amp_grad_norm_is_the_unscaled_norm(tmp_path: Path) -> None:
    model = new_model()
    reference = copy.deepcopy(model)
    loader = DataLoader(make_data(), batch_size=4)
    trainer = trainer_for(tmp_path, precision=AMP(init_scale=1024.0), max_steps=20, log_every_n_steps=5)
    trainer.fit(model, loader)
    series = scalars(trainer.log_dir)
    expected = reference_loop(reference, loader, steps=20, k=1, precision="amp", init_scale=1024.0)
    assert [s for s, _ in series["train/grad_norm"]] == [5, 10, 15, 20]
    for step, value in series["train/grad_norm"]:
        assert value == pytest.approx(expected[step - 1]["norm"], rel=1e-5)
        assert value < 100  # a scaled norm would be ~1024x larger
    assert [v for _, v in series["train/loss_scale"]] == [1024.0] * 4
    assert [v for _, v in series["train/skipped_steps"]] == [0.0] * 4
    for step, value in series["train/loss"]:
        assert value == pytest.approx(expected[step - 1]["loss"], rel=1e-5)


def test_logged_grad_norm_is_taken_before_clipping(tmp_path: Path) -> None:
    model = new_model()
    reference = copy.deepcopy(model)
    loader = DataLoader(make_data(), batch_size=4)
    trainer = trainer_for(tmp_path, gradient_clip_val=0.05, max_steps=10, log_every_n_steps=5)
    trainer.fit(model, loader)
    expected = reference_loop(reference, loader, steps=10, k=1, clip=0.05)
    series = scalars(trainer.log_dir)["train/grad_norm"]
    assert [s for s, _ in series] == [5, 10]
    for step, value in series:
        assert value == pytest.approx(expected[step - 1]["norm"], rel=1e-5) and value > 0.05
    assert torch.equal(model.net[0].weight, reference.net[0].weight)  # same clipped trajectory


class InjectOverflow(Callback):
    """Writes inf into one gradient just before optimizer step number `at_step`."""

    def __init__(self, at_step: int) -> None:
        self.at_step = at_step

    def on_before_optimizer_step(self, trainer, module, optimizer) -> None:
        if trainer.global_step + 1 == self.at_step:
            next(module.parameters()).grad[0, 0] = float("inf")


def test_loss_scale_halves_after_an_injected_overflow(tmp_path: Path) -> None:
    trainer = trainer_for(tmp_path, precision=AMP(init_scale=1024.0), max_steps=6, log_every_n_steps=1, callbacks=[InjectOverflow(3)])
    trainer.fit(new_model(), DataLoader(make_data(), batch_size=4))
    series = scalars(trainer.log_dir)
    assert [s for s, _ in series["train/loss_scale"]] == [1, 2, 3, 4, 5, 6]
    assert [v for _, v in series["train/loss_scale"]] == [1024.0, 1024.0, 512.0, 512.0, 512.0, 512.0]
    assert [v for _, v in series["train/skipped_steps"]] == [0.0, 0.0, 1.0, 1.0, 1.0, 1.0]
    assert math.isinf(series["train/grad_norm"][2][1])
    assert trainer.state.skipped_steps == 1 and trainer.global_step == 6


def test_logger_false_writes_nothing(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    trainer = trainer_for(root, logger=False, max_steps=3, log_every_n_steps=1)
    trainer.fit(new_model(), DataLoader(make_data(), batch_size=4), DataLoader(make_data(), batch_size=8))
    assert not root.exists()
    assert trainer.logger is None and trainer.callback_metrics["train/loss"] > 0
    with_ckpt = trainer_for(root, logger=False, enable_checkpointing=True, max_steps=3, log_every_n_steps=1)
    with_ckpt.fit(new_model(), DataLoader(make_data(), batch_size=4))
    assert list(root.rglob("last.ckpt")) and not list(root.rglob("events.out.tfevents*"))


def test_each_run_gets_its_own_folder(tmp_path: Path) -> None:
    loader = DataLoader(make_data(), batch_size=8)
    first, second = (trainer_for(tmp_path, max_steps=5, log_every_n_steps=5) for _ in range(2))
    first.fit(new_model(), loader)
    second.fit(new_model(), loader)
    assert first.log_dir == tmp_path / "default" / "version_0"
    assert second.log_dir == tmp_path / "default" / "version_1"
    for trainer in (first, second):
        assert len(list(trainer.log_dir.glob("events.out.tfevents*"))) == 1
        assert [s for s, _ in scalars(trainer.log_dir)["train/loss"]] == [5]
    named = trainer_for(tmp_path, logger=TensorBoardLogger(tmp_path, name="mlp"), max_steps=1)
    named.fit(new_model(), loader)
    assert named.log_dir == tmp_path / "mlp" / "version_0"


def test_hyperparameters_are_written_once_per_run(tmp_path: Path) -> None:
    trainer = trainer_for(tmp_path, max_epochs=2, log_every_n_steps=5, seed=3)
    model = new_model(hidden=6)
    trainer.fit(model, DataLoader(make_data(), batch_size=8))
    trainer.fit(model, DataLoader(make_data(), batch_size=8))  # same run: nothing new
    acc = EventAccumulator(str(trainer.log_dir))
    acc.Reload()
    content = acc.PluginTagToContent(hparams_metadata.PLUGIN_NAME)
    assert list(content) == [hparams_metadata.SESSION_START_INFO_TAG]  # no experiment tag, no sub-run
    info = hparams_metadata.parse_session_start_info_plugin_data(content[hparams_metadata.SESSION_START_INFO_TAG])
    assert info.hparams["module/hidden"].number_value == 6
    assert info.hparams["module/lr"].number_value == pytest.approx(0.05)
    assert info.hparams["trainer/max_epochs"].number_value == 2
    assert info.hparams["trainer/precision"].string_value == "fp32"
    assert info.hparams["trainer/seed"].number_value == 3
    assert [p.name for p in trainer.log_dir.iterdir() if p.is_dir()] == []


def test_logger_is_flushed_and_closed_when_fit_fails(tmp_path: Path) -> None:
    class Boom(Net):
        def training_step(self, batch, batch_idx):
            if batch_idx == 3:
                raise RuntimeError("boom")
            return super().training_step(batch, batch_idx)

    torch.manual_seed(0)
    trainer = trainer_for(tmp_path, max_epochs=1, log_every_n_steps=1)
    with pytest.raises(RuntimeError, match="boom"):
        trainer.fit(Boom(), DataLoader(make_data(), batch_size=8))
    assert trainer.logger._writer is None  # closed
    assert [s for s, _ in scalars(trainer.log_dir)["train/loss"]] == [1, 2, 3]


def test_self_log_reductions_and_weights(tmp_path: Path) -> None:
    values = [torch.tensor(v) for v in (1.0, 4.0, 2.0)]
    sizes = [10, 10, 5]

    class Scripted(Net):
        def validation_step(self, batch, batch_idx):
            v = values[batch_idx]
            self.log("v/mean", v)
            self.log("v/weighted", v, batch_size=sizes[batch_idx])
            self.log("v/sum", v, reduce="sum")
            self.log("v/max", v, reduce="max")
            self.log("v/min", v, reduce="min")
            self.log("v/step", v, on_step=True, on_epoch=False)

    torch.manual_seed(0)
    trainer = trainer_for(tmp_path, logger=False)
    results = trainer.validate(Scripted(), DataLoader(make_data(25), batch_size=10))
    # Without batch_size the mean is weighted by each batch's inferred size, as in Lightning.
    assert results == pytest.approx({"v/mean": 60 / 25, "v/weighted": 60 / 25, "v/sum": 7.0, "v/max": 4.0, "v/min": 1.0})
    assert "v/step" not in trainer.callback_metrics  # per-step in validation: never a callback metric, as in Lightning
    assert all(isinstance(v, float) and not torch.is_tensor(v) for v in trainer.callback_metrics.values())
    with pytest.raises(ValueError, match=r"reduce=.*expected one of 'mean', 'sum', 'max', 'min'. Received: 'median'"):
        trainer._run.log_metric("x", 1.0, on_step=True, on_epoch=False, prog_bar=False, reduce="median", batch_size=None)
    with pytest.raises(ValueError, match=r"expected a scalar .* Received: a tensor of shape \(2,\)"):
        trainer._run.log_metric("x", torch.ones(2), on_step=True, on_epoch=False, prog_bar=False, reduce="mean", batch_size=None)


def test_history_has_one_row_per_epoch(tmp_path: Path) -> None:
    data = make_data()
    trainer = trainer_for(tmp_path, logger=False, max_epochs=3, log_every_n_steps=100)
    trainer.fit(new_model(), DataLoader(data, batch_size=8), DataLoader(data, batch_size=16))
    history = trainer.history
    assert [row["epoch"] for row in history] == [0.0, 1.0, 2.0]
    assert [row["step"] for row in history] == [10.0, 20.0, 30.0]
    assert all({"val/loss", "train/mae_epoch"} <= set(row) for row in history)
    assert history[-1]["val/loss"] == pytest.approx(trainer.callback_metrics["val/loss"])
    history.clear()  # a copy: the trainer's record is read-only
    assert len(trainer.history) == 3


def test_fit_logs_a_summary_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    model = new_model()
    model.net[0].weight.requires_grad_(False)
    trainer = trainer_for(tmp_path, logger=False, max_steps=2, accumulate_grad_batches=2)
    with caplog.at_level(logging.INFO, logger="trainer"):
        trainer.fit(model, DataLoader(make_data(), batch_size=8))
        trainer.args.max_steps = 3
        trainer.fit(model, DataLoader(make_data(), batch_size=8))
    lines = [r.getMessage() for r in caplog.records if r.name == "trainer" and "parameters" in r.getMessage()]
    assert lines == [
        "Training Net: 49 parameters (17 trainable) | precision fp32 | device cpu | effective batch size 16 "
        "(batch_size 8 x accumulate_grad_batches 2 x world_size 1)"
    ]


def test_module_init_arguments_become_hparams() -> None:
    class Child(Net):
        def __init__(self, depth: int = 2, **kwargs) -> None:
            super().__init__(**kwargs)

    class Own(Net):
        def __init__(self) -> None:
            super().__init__()
            self.hparams = {"mine": 1}

    assert Net(hidden=3).hparams == {"hidden": 3, "lr": 0.05, "two_groups": False}
    assert Child(5, lr=0.1).hparams == {"depth": 5, "lr": 0.1}
    assert Own().hparams == {"mine": 1}
    assert copy.deepcopy(Net(hidden=3)).hparams["hidden"] == 3


def test_library_code_never_prints() -> None:
    """Only `cli_lightning_logo`, which a script calls to print (Lightning's example scripts do), prints."""
    files = [*(ROOT / "trainer").glob("*.py"), *(ROOT / "callbacks").glob("*.py")]
    offenders = []
    for path in files:
        tree = ast.parse(path.read_text())
        allowed = {id(node) for function in ast.walk(tree)
                   if isinstance(function, ast.FunctionDef) and function.name == "cli_lightning_logo"
                   for node in ast.walk(function)}
        offenders += [f"{path.name}:{node.lineno}" for node in ast.walk(tree)
                      if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print"
                      and id(node) not in allowed]
    assert offenders == []


def test_step_values_are_reduced_over_the_accumulation_window(tmp_path: Path) -> None:
    class PerBatch(Net):
        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = torch.nn.functional.mse_loss(self(x), y)
            self.log("train/loss", loss)  # the contract's example: the micro-batch's own loss
            self.log("m/idx", float(batch_idx))
            self.log("m/max", float(batch_idx), reduce="max")
            return loss

    torch.manual_seed(0)
    model = PerBatch()
    reference = copy.deepcopy(model)
    loader = DataLoader(make_data(), batch_size=4)
    trainer = trainer_for(tmp_path, max_steps=6, accumulate_grad_batches=3, log_every_n_steps=2)
    trainer.fit(model, loader)
    series = scalars(trainer.log_dir)
    expected = reference_loop(reference, loader, steps=6, k=3)
    # Optimizer step s covers batches 3(s-1) .. 3s-1: the mean (or max) over them, not the last one.
    assert series["m/idx"] == [(2, 4.0), (4, 10.0), (6, 16.0)]
    assert series["m/max"] == [(2, 5.0), (4, 11.0), (6, 17.0)]
    for step, value in series["train/loss"]:  # equal to the automatic window loss
        assert value == pytest.approx(expected[step - 1]["loss"], rel=1e-5)
    assert trainer.callback_metrics["m/idx"] == 16.0


def test_training_and_evaluation_metrics_stay_apart(tmp_path: Path) -> None:
    data = make_data()
    trainer = trainer_for(tmp_path, logger=False, max_steps=3)
    model = new_model()
    trainer.fit(model, DataLoader(data, batch_size=8))  # stops mid-epoch: train/mae_epoch still open
    assert set(trainer.validate(model, DataLoader(data, batch_size=16))) == {"val/loss"}


def test_a_metric_named_like_an_automatic_one_is_the_users(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    class Named(Net):
        def training_step(self, batch, batch_idx):
            loss = super().training_step(batch, batch_idx)
            self.log("train/loss", loss, on_step=False, on_epoch=True)
            self.log("train/lr-group0", 7.0)  # the user's value wins over the automatic one
            return loss

    torch.manual_seed(0)
    trainer = trainer_for(tmp_path, max_epochs=1, log_every_n_steps=5)
    with caplog.at_level(logging.INFO, logger="trainer"):
        trainer.fit(Named(), DataLoader(make_data(), batch_size=8))
    notes = [r.getMessage() for r in caplog.records if "no longer writes its own" in r.getMessage()]
    assert [note.split("'")[1] for note in notes] == ["train/loss"]  # once; a per-step value just replaces ours
    series = scalars(trainer.log_dir)
    assert [s for s, _ in series["train/loss"]] == [10]  # the user's epoch mean alone: the Trainer's steps aside
    assert "train/loss_epoch" not in series
    assert trainer.callback_metrics["train/loss"] == series["train/loss"][0][1]
    assert [v for _, v in series["train/lr-group0"]] == [7.0, 7.0]

    class Clash(Net):
        def training_step(self, batch, batch_idx):
            self.log("train/mae_epoch", 1.0, on_step=False, on_epoch=True)  # Net writes train/mae's epoch value there
            return super().training_step(batch, batch_idx)

    with pytest.raises(ValueError, match=r"'train/mae'.*written as 'train/mae_epoch'.*rename one"):
        trainer_for(tmp_path, logger=False, max_steps=1).fit(Clash(), DataLoader(make_data(), batch_size=8))


def test_epoch_end_hook_metrics_belong_to_their_epoch(tmp_path: Path) -> None:
    class EpochEnd(Net):
        def on_train_epoch_end(self) -> None:
            self.log("train/epoch_idx", float(self.trainer.current_epoch), on_step=False, on_epoch=True)

    torch.manual_seed(0)
    trainer = trainer_for(tmp_path, max_epochs=3, log_every_n_steps=100)
    trainer.fit(EpochEnd(), DataLoader(make_data(), batch_size=8))
    assert scalars(trainer.log_dir)["train/epoch_idx"] == [(10, 0.0), (20, 1.0), (30, 2.0)]
    assert [row["train/epoch_idx"] for row in trainer.history] == [0.0, 1.0, 2.0]


def test_standalone_validate_closes_its_writer(tmp_path: Path) -> None:
    trainer = trainer_for(tmp_path)
    results = trainer.validate(new_model(), DataLoader(make_data(), batch_size=16))
    assert trainer.logger._writer is None
    assert scalars(trainer.log_dir)["val/loss"] == [(0, pytest.approx(results["val/loss"]))]


def test_a_module_copies_and_pickles_without_its_trainer(tmp_path: Path) -> None:
    import pickle

    import numpy as np

    copies: list[Net] = []

    class Keep(Callback):
        def on_train_epoch_end(self, trainer, module) -> None:
            copies.append(copy.deepcopy(module))  # the writer is open here: it must not be copied
            pickle.loads(pickle.dumps(module))
            module.log("np/value", np.float32(0.5), on_epoch=True)

    model = new_model()
    trainer = trainer_for(tmp_path, max_epochs=1, callbacks=[Keep()])
    trainer.fit(model, DataLoader(make_data(), batch_size=8))
    assert model.trainer is trainer and "_trainer_ref" in copies[0].__dict__
    with pytest.raises(RuntimeError, match="not attached to a Trainer"):
        copies[0].trainer
    assert torch.equal(copies[0].net[0].weight, model.net[0].weight)
    assert trainer.callback_metrics["np/value"] == 0.5


def test_hparams_set_to_empty_stay_empty() -> None:
    class NoHparams(Net):
        def __init__(self, secret: str = "x") -> None:
            super().__init__()
            self.hparams = {}  # opt out

    assert NoHparams("token").hparams == {}
