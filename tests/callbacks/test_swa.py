"""`callbacks.StochasticWeightAveraging` equals a hand-written SWA loop and Lightning's callback.

The project below is written the Lightning way with our imports; its Lightning twin is the
same text with only the import lines rewritten (tests/helpers/lightning_projects). It is
compared bit for bit with real Lightning, with the hand-written loop of the documented
schedule (`AveragedModel`, `SWALR`, `update_bn`), and with itself across resumes.
"""

from __future__ import annotations

import contextlib
import types
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.optim.swa_utils import SWALR, AveragedModel, update_bn

import callbacks
from tests.helpers.lightning_projects import load_source
from trainer import Callback, seed_everything

PROJECT = '''
import torch
from torch.utils.data import DataLoader, TensorDataset
from trainer import Callback, LightningModule, Trainer, seed_everything
from callbacks import StochasticWeightAveraging


class Net(LightningModule):
    def __init__(self, scheduler="step", batch_norm=True):
        super().__init__()
        norm = torch.nn.BatchNorm1d(16) if batch_norm else torch.nn.Identity()
        self.net = torch.nn.Sequential(torch.nn.Linear(6, 16), norm, torch.nn.ReLU(), torch.nn.Dropout(0.1), torch.nn.Linear(16, 1))
        self.scheduler = scheduler

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self(x).float(), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self(x).float(), y))

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)
        if self.scheduler == "step":
            return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)]
        return optimizer


def data(n=48, seed=0):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 6, generator=generator)
    return TensorDataset(x, x[:, :2].sum(1, keepdim=True) + 0.1 * torch.randn(n, 1, generator=generator))


def loaders(validate):
    train = DataLoader(data(), batch_size=8, shuffle=True)
    return train, (DataLoader(data(16, seed=1), batch_size=8) if validate else None)


class StopAt(Callback):
    def __init__(self, step):
        self.step = step

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if trainer.global_step == self.step:
            trainer.should_stop = True


def main(precision="32-true", max_epochs=5, max_steps=-1, validate=False, swa=None, callbacks=(), ckpt_path=None,
         seed=7, root=None, gradient_clip_val=None, **kwargs):
    seed_everything(seed)
    model = Net(**kwargs)
    swa = swa if swa is not None else StochasticWeightAveraging(swa_lrs=0.02, swa_epoch_start=2, annealing_epochs=2)
    trainer = Trainer(max_epochs=max_epochs, max_steps=max_steps, precision=precision, accelerator="cpu", logger=False,
                      gradient_clip_val=gradient_clip_val,
                      enable_checkpointing=root is not None, default_root_dir=root or "runs", enable_progress_bar=False,
                      enable_model_summary=False,
                      num_sanity_val_steps=0, callbacks=[swa, *callbacks])
    trainer.fit(model, *loaders(validate), ckpt_path=ckpt_path)
    return {"model": model, "trainer": trainer, "swa": swa}
'''


def load(framework: str = "ours") -> types.ModuleType:
    """The project as a fresh module: as written, or with its imports rewritten to Lightning's."""
    return load_source(PROJECT, framework, "swa")


def run(framework: str = "ours", **kwargs: Any) -> dict[str, Any]:
    return load(framework).main(**kwargs)  # type: ignore[no-any-return]


def assert_equal_states(ours: dict[str, torch.Tensor], theirs: dict[str, torch.Tensor]) -> None:
    assert list(ours) == list(theirs)
    different = {k: float((ours[k].double() - theirs[k].double()).abs().max()) for k in ours if not torch.equal(ours[k], theirs[k])}
    assert not different, f"differ: {different}"


# ------------------------------------------------------------------ the hand-written loop
def by_hand(precision: str = "fp32", epochs: int = 5, start: int = 1, swa_lr: float = 0.02, anneal: int = 2,
            strategy: str = "cos", validate: bool = False, batch_norm: bool = True, scheduler: Any = "step",
            last_step: bool = True) -> torch.nn.Module:
    """The schedule of docs/weight_averaging.md written out: `start` is the zero-based first SWA epoch."""
    project = load()
    seed_everything(7)
    model = project.Net(scheduler=scheduler, batch_norm=batch_norm)
    train, val = project.loaders(validate)
    setup = model.configure_optimizers()
    optimizer, sched = (setup[0][0], setup[1][0]) if isinstance(setup, tuple) else (setup, None)
    scaler = torch.amp.GradScaler("cpu", enabled=precision == "amp")
    dtype = {"amp": torch.float16, "bf16": torch.bfloat16}.get(precision)
    autocast = (lambda: torch.autocast("cpu", dtype=dtype)) if dtype is not None else contextlib.nullcontext
    average, last_grads = None, None
    for epoch in range(epochs):
        if epoch == start:  # SWALR replaces the scheduler (Lightning's initial_lr and last_epoch)
            for group in optimizer.param_groups:
                group["initial_lr"] = swa_lr
            sched = SWALR(optimizer, swa_lr=swa_lr, anneal_epochs=anneal, anneal_strategy=strategy,  # type: ignore[arg-type]
                          last_epoch=epochs + batch_norm if strategy == "cos" else -1)
            average = AveragedModel(model, avg_fn=lambda a, w, n: a + (w - a) / (n + 1))
        if average is not None:  # the weights each SWA epoch starts from
            average.update_parameters(model)
        model.train()
        for x, y in train:
            with autocast():
                loss = torch.nn.functional.mse_loss(model(x).float(), y)
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            scaler.step(optimizer)
            scaler.update()
            last_grads = [p.grad.clone() for p in model.parameters()]  # type: ignore[union-attr]
            optimizer.zero_grad(set_to_none=True)
        if val is not None:
            model.eval()
            with torch.inference_mode():
                for x, _ in val:
                    with autocast():
                        model(x)
            last_grads = None  # validation clears the gradients
        if sched is not None:
            sched.step()
    assert average is not None
    with torch.no_grad():
        for mine, averaged in zip(model.parameters(), average.module.parameters()):
            mine.copy_(averaged)
    if batch_norm:
        with autocast():
            update_bn(train, model)
        if last_step and last_grads is not None:  # Lightning's extra epoch steps on the last gradients
            for param, grad in zip(model.parameters(), last_grads):
                param.grad = grad
            scaler.unscale_(optimizer)
            scaler.step(optimizer)
            scaler.update()
    return model


@pytest.mark.parametrize("precision", ["fp32", "amp", "bf16"])  # ours: Lightning's spellings run Lightning's autocast
def test_equals_the_hand_written_loop(precision: str) -> None:
    ours = run(precision=precision)
    assert_equal_states(ours["model"].state_dict(), by_hand(precision).state_dict())
    assert int(ours["swa"].n_averaged) == 4  # epochs 1..4 start from averaged weights
    assert ours["trainer"].current_epoch == 5 and ours["trainer"].global_step == 30


@pytest.mark.parametrize("case", [dict(validate=True), dict(batch_norm=False), dict(scheduler=None)])
def test_equals_the_hand_written_loop_without_last_step_or_scheduler(case: dict[str, Any]) -> None:
    ours = run(**case)
    assert_equal_states(ours["model"].state_dict(), by_hand(**case).state_dict())


def test_the_last_step_and_the_batch_norm_pass_change_the_weights() -> None:
    """The two finishing touches are real: without them the hand-written loop ends elsewhere."""
    final = by_hand().state_dict()
    no_step = by_hand(last_step=False).state_dict()
    assert not torch.equal(final["net.0.weight"], no_step["net.0.weight"])
    assert torch.equal(final["net.1.running_mean"], no_step["net.1.running_mean"])
    assert int(final["net.1.num_batches_tracked"]) == 6  # the statistics of one pass over the 6 batches


def test_float_start_linear_annealing_and_its_schedule() -> None:
    swa = callbacks.StochasticWeightAveraging(swa_lrs=[0.03], swa_epoch_start=0.6, annealing_epochs=3,
                                              annealing_strategy="linear")
    lrs: list[float] = []

    class Rates(Callback):
        def on_train_epoch_start(self, trainer: Any, module: Any) -> None:
            lrs.append(trainer.optimizers[0].param_groups[0]["lr"])

    ours = run(swa=swa, callbacks=[Rates()])
    assert swa.swa_start == 2 and swa.swa_end == 4  # int(0.6 * 5) = 3: the third epoch, zero-based 2
    expected = by_hand(start=2, swa_lr=0.03, anneal=3, strategy="linear")
    assert_equal_states(ours["model"].state_dict(), expected.state_dict())
    assert lrs[:3] == [0.05, 0.05 * 0.7, 0.05 * 0.7 * 0.7]  # StepLR until SWALR takes over at epoch 2
    assert lrs[3] == pytest.approx(lrs[2] + (0.03 - lrs[2]) / 3) and lrs[4] != 0.03


# ------------------------------------------------------------------------- real Lightning
LIGHTNING_CASES = [
    dict(precision="32-true"), dict(precision="bf16-mixed"), dict(validate=True), dict(batch_norm=False),
    dict(scheduler=None), dict(swa_epoch_start=0.4, annealing_strategy="linear", annealing_epochs=0),
    dict(gradient_clip_val=0.05),
]


@pytest.mark.parametrize("case", LIGHTNING_CASES, ids=lambda case: ",".join(f"{k}={v}" for k, v in case.items()))
def test_same_weights_as_lightning(case: dict[str, Any]) -> None:
    pytest.importorskip("lightning")
    options = {k: case.pop(k) for k in ("swa_epoch_start", "annealing_strategy", "annealing_epochs") if k in case}
    results = {}
    for framework in ("ours", "lightning"):
        project = load(framework)
        swa = project.StochasticWeightAveraging(swa_lrs=0.02, **{"swa_epoch_start": 2, "annealing_epochs": 2, **options})
        results[framework] = project.main(swa=swa, **case)
    ours, theirs = results["ours"], results["lightning"]
    assert_equal_states(ours["model"].state_dict(), theirs["model"].state_dict())
    # A deliberate difference: Lightning recomputes BatchNorm in an extra epoch that ends with one
    # more optimizer step; here that pass runs when training ends, and neither counter moves.
    extra = int(case.get("batch_norm", True))
    assert theirs["trainer"].current_epoch == ours["trainer"].current_epoch + extra == 5 + extra
    assert theirs["trainer"].global_step == ours["trainer"].global_step + extra == 30 + extra


def test_checkpoint_holds_lightnings_callback_keys(tmp_path: Path) -> None:
    pytest.importorskip("lightning")
    states = {}
    for framework in ("ours", "lightning"):
        trainer = run(framework, max_epochs=3)["trainer"]
        trainer.save_checkpoint(tmp_path / f"{framework}.ckpt")
        states[framework] = torch.load(tmp_path / f"{framework}.ckpt", weights_only=False)
    ours, theirs = states["ours"], states["lightning"]
    mine, lightning = ours["callbacks"]["StochasticWeightAveraging"], theirs["callbacks"]["StochasticWeightAveraging"]
    assert set(lightning) <= set(mine)
    assert mine["n_averaged"] == lightning["n_averaged"] == 2
    assert mine["latest_update_epoch"] == lightning["latest_update_epoch"] == 2
    assert set(mine["scheduler_state"]) == set(lightning["scheduler_state"])
    assert mine["scheduler_state"]["_last_lr"] == lightning["scheduler_state"]["_last_lr"]
    assert list(mine["average_model_state"]) == list(lightning["average_model_state"])
    assert ours["lr_schedulers"][0]["_last_lr"] == theirs["lr_schedulers"][0]["_last_lr"]  # SWALR's, in both
    assert ours["schedulers"][0]["class"] == "StepLR"  # what a resume restores configure_optimizers' scheduler from


# ----------------------------------------------------------------------------------- resume
class SaveAt(Callback):
    """A checkpoint after optimizer step `step`, or at the end of epoch `epoch` (its hook)."""

    def __init__(self, path: Path, step: int | None = None, epoch: int | None = None) -> None:
        self.path, self.step, self.epoch = path, step, epoch

    def on_train_step_end(self, trainer: Any, module: Any, stepped: bool) -> None:
        if trainer.global_step == self.step:
            trainer.save_checkpoint(self.path)

    def on_train_epoch_end(self, trainer: Any, module: Any) -> None:
        if trainer.current_epoch == self.epoch:
            trainer.save_checkpoint(self.path)


@pytest.mark.parametrize(("where", "scheduler"), [
    (dict(step=4), "step"),  # mid-epoch 0, before SWA starts
    (dict(step=6), "step"),  # the last step of epoch 0, before its end
    (dict(step=15), "step"),  # mid-epoch 2, inside the window
    (dict(epoch=2), None),  # an epoch end inside the window, SWALR stepped by the callback
    (dict(step=30), "step"),  # the last step of training: its gradients are in the checkpoint
])
def test_resume_is_exact(where: dict[str, int], scheduler: Any, tmp_path: Path) -> None:
    path = tmp_path / "cut.ckpt"
    whole = run(scheduler=scheduler, callbacks=[SaveAt(path, **where)])
    resumed = run(scheduler=scheduler, ckpt_path=path, seed=123)  # other initial weights and random streams
    assert_equal_states(resumed["model"].state_dict(), whole["model"].state_dict())
    assert int(resumed["swa"].n_averaged) == int(whole["swa"].n_averaged) == 4


def test_resume_after_training_ended_finishes_the_same(tmp_path: Path) -> None:
    """A checkpoint written after the last epoch (as last.ckpt is) resumes into the finishing
    pass with the same result; one written after fit holds the result and keeps it."""
    before, after = tmp_path / "before.ckpt", tmp_path / "after.ckpt"

    class SaveAfterFit(Callback):
        def on_fit_end(self, trainer: Any, module: Any) -> None:
            trainer.save_checkpoint(after)

    whole = run(callbacks=[SaveAt(before, epoch=4), SaveAfterFit()], root=tmp_path / "run")
    (last,) = (tmp_path / "run").rglob("last.ckpt")  # the Trainer's own, written when the last epoch ended
    for path in (before, last, after):
        resumed = run(ckpt_path=path, seed=123)
        assert_equal_states(resumed["model"].state_dict(), whole["model"].state_dict())


# ------------------------------------------------------------------------------------ errors
@pytest.mark.parametrize(("kwargs", "named"), [
    (dict(swa_lrs=0.0), "swa_lrs=0.0"), (dict(swa_lrs=[0.1, -1.0]), "swa_lrs=[0.1, -1.0]"), (dict(swa_lrs=[]), "swa_lrs=[]"),
    (dict(swa_lrs="0.1"), "swa_lrs='0.1'"), (dict(swa_lrs=0.1, swa_epoch_start=0), "swa_epoch_start=0"),
    (dict(swa_lrs=0.1, swa_epoch_start=1.5), "swa_epoch_start=1.5"), (dict(swa_lrs=0.1, swa_epoch_start=True), "swa_epoch_start=True"),
    (dict(swa_lrs=0.1, annealing_epochs=-1), "annealing_epochs=-1"),
    (dict(swa_lrs=0.1, annealing_strategy="step"), "annealing_strategy='step'"),
    (dict(swa_lrs=0.1, avg_fn=3), "avg_fn=3"), (dict(swa_lrs=0.1, device="nowhere"), "device='nowhere'"),
])
def test_invalid_arguments_are_refused_at_construction(kwargs: dict[str, Any], named: str) -> None:
    with pytest.raises(ValueError, match="StochasticWeightAveraging got an invalid argument: ") as error:
        callbacks.StochasticWeightAveraging(**kwargs)
    assert named in str(error.value) and "expected" in str(error.value)


def test_every_invalid_argument_is_named_at_once() -> None:
    with pytest.raises(ValueError, match="StochasticWeightAveraging got invalid arguments: ") as error:
        callbacks.StochasticWeightAveraging(swa_lrs=-1.0, swa_epoch_start=0, annealing_strategy="cosine")
    assert all(name in str(error.value) for name in ("swa_lrs=", "swa_epoch_start=", "annealing_strategy="))


def test_fit_start_errors() -> None:
    with pytest.raises(ValueError, match=r"swa_lrs=\[0.1, 0.2\]\) has 2 values; the optimizer has 1"):
        run(swa=callbacks.StochasticWeightAveraging(swa_lrs=[0.1, 0.2]))
    project = load()
    with pytest.raises(ValueError, match="fraction of max_epochs, but this fit has no epoch limit"):
        swa = callbacks.StochasticWeightAveraging(swa_lrs=0.1)
        project.Trainer(max_steps=3, callbacks=[swa], logger=False, enable_checkpointing=False,
                        enable_progress_bar=False).fit(project.Net(), project.loaders(False)[0])

    class TwoSchedulers(project.Net):  # type: ignore[name-defined,misc]
        def configure_optimizers(self) -> Any:
            opt = torch.optim.SGD(self.parameters(), lr=0.1)
            return [opt], [torch.optim.lr_scheduler.StepLR(opt, 1), torch.optim.lr_scheduler.ExponentialLR(opt, 0.9)]

    with pytest.raises(ValueError, match="replaces one LR scheduler; configure_optimizers\\(\\) returned 2"):
        project.Trainer(max_epochs=2, callbacks=[callbacks.StochasticWeightAveraging(swa_lrs=0.1)], logger=False,
                        enable_checkpointing=False, enable_progress_bar=False).fit(TwoSchedulers(), project.loaders(False)[0])


def parameters(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in module.named_parameters()}


@pytest.mark.parametrize(("max_steps", "transferred"), [(20, False), (27, True), (30, True)])
def test_a_run_cut_short_in_the_last_epoch_still_takes_the_average(max_steps: int, transferred: bool) -> None:
    """Lightning counts an epoch cut short (max_steps, a stop request) as completed: a run cut inside
    the window's last epoch takes the average (without the BatchNorm pass), one cut earlier keeps its weights."""
    result = run(max_steps=max_steps)
    assert result["trainer"].global_step == max_steps and int(result["swa"].n_averaged) == (3 if max_steps == 20 else 4)
    mine, average = parameters(result["model"]), parameters(result["swa"].average_model.module)
    assert all(torch.equal(mine[name], average[name]) for name in mine) == transferred


@pytest.mark.parametrize("case", [dict(max_steps=20), dict(max_steps=27), dict(max_steps=30), dict(stop=27), dict(stop=30)],
                         ids=lambda case: ",".join(f"{k}={v}" for k, v in case.items()))
def test_stopping_early_as_lightning(case: dict[str, int]) -> None:
    pytest.importorskip("lightning")
    results = {}
    for framework in ("ours", "lightning"):
        project = load(framework)
        stop = [project.StopAt(case["stop"])] if "stop" in case else []
        results[framework] = project.main(max_steps=case.get("max_steps", -1), callbacks=stop)
    assert_equal_states(results["ours"]["model"].state_dict(), results["lightning"]["model"].state_dict())
