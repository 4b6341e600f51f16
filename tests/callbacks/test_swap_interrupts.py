"""A weight-averaging swap is all or nothing: an interrupt (Ctrl-C, SIGTERM) or an exception
injected at every tensor copy of a swap never leaves a checkpoint holding a mix of the training
and the averaged weights, and the resumed run ends with the weights of the uninterrupted one."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest
import torch

import callbacks
from tests.helpers.checkpoints import fresh_model, scramble_global_rng, shuffled
from tests.helpers.reference import loader, make_data, make_model, weights
from trainer import Callback, Trainer
from trainer.checkpoint import load_checkpoint
from trainer.strategies.requeue import REQUEUED_ENV

LAUNCH = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")

COPIES = 8  # TinyNet's 4 parameter tensors, each copied twice by a swap (in one direction, then the other)


class Injector:
    """Replaces `Tensor.copy_` while armed: at its `index`-th call, raises `kind` (a signal sent to
    this process, or an exception), then lets the copy happen (a deferred signal doesn't stop it)."""

    def __init__(self, kind: str, index: int) -> None:
        self.kind, self.index = kind, index
        self.armed, self.calls, self.fired = False, 0, False

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        original = torch.Tensor.copy_
        injector = self

        def copy_(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
            if injector.armed:
                if injector.calls == injector.index:
                    injector.armed, injector.fired = False, True
                    if injector.kind == "error":
                        raise RuntimeError("injected inside the swap")
                    signal.raise_signal({"sigint": signal.SIGINT, "sigterm": signal.SIGTERM}.get(injector.kind,
                                                                                                  signal.SIGUSR1))
                injector.calls += 1
            return original(tensor, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, "copy_", copy_)


class Arm(Callback):
    """Listed just before the averaging callback: arms the injector at `hook` of epoch `epoch` and
    notes which weights are the training ones and which the average (the checkpoint's truth)."""

    def __init__(self, injector: Injector, hook: str, averaging: Any, epoch: int | None = None) -> None:
        self.injector, self.hook, self.averaging, self.epoch = injector, hook, averaging, epoch
        self.expected: dict[str, dict[str, torch.Tensor]] | None = None

    def _maybe(self, hook: str, trainer: Any, module: Any) -> None:
        if hook != self.hook or self.epoch not in (None, trainer.current_epoch) or trainer.sanity_checking \
                or self.expected:
            return
        other = self.averaging.average_model.module if hasattr(self.averaging, "average_model") else None
        mine, theirs = weights(module), weights(other)
        in_module_is_average = hook == "on_validation_epoch_end"  # the average was swapped in for validation
        self.expected = {"training": theirs if in_module_is_average else mine,
                         "average": mine if in_module_is_average else theirs}
        self.injector.armed = True

    def on_validation_epoch_start(self, trainer: Any, module: Any) -> None:
        self._maybe("on_validation_epoch_start", trainer, module)

    def on_validation_epoch_end(self, trainer: Any, module: Any) -> None:
        self._maybe("on_validation_epoch_end", trainer, module)

    def on_train_end(self, trainer: Any, module: Any) -> None:
        self._maybe("on_train_end", trainer, module)


class Disarm(Callback):
    """Listed just after the averaging callback: the swap is over."""

    def __init__(self, injector: Injector) -> None:
        self.injector = injector

    def on_validation_epoch_start(self, trainer: Any, module: Any) -> None:
        self.injector.armed = False

    on_validation_epoch_end = on_validation_epoch_start

    def on_train_end(self, trainer: Any, module: Any) -> None:
        self.injector.armed = False


def _ema_run(root: Path, extra: tuple[Callback, ...] = (), averaging: Any = None, ckpt_path: Any = None,
             model: Any = None) -> tuple[Any, Any, Trainer]:
    averaging = averaging or callbacks.EMAWeightAveraging(decay=0.9)
    model = model if model is not None else make_model()
    if ckpt_path is None:
        torch.manual_seed(1)
    run = Trainer(max_epochs=2, logger=False, enable_progress_bar=False, enable_model_summary=False, device="cpu",
                  num_sanity_val_steps=0, root_dir=root, callbacks=[*extra[:1], averaging, *extra[1:]])
    run.fit(model, shuffled(make_data()), loader(make_data(12, seed=3), shuffle=False), ckpt_path=ckpt_path)
    return model, averaging, run


def _equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], what: str) -> None:
    assert a.keys() == b.keys(), what
    for key in a:
        assert torch.equal(a[key], b[key]), f"{what}: {key} differs"


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    model, averaging, _ = _ema_run(tmp_path_factory.mktemp("full"))
    return weights(model), weights(averaging.average_model.module)  # the module ends holding the average


POINTS = [("on_validation_epoch_start", 0), ("on_validation_epoch_end", 0), ("on_validation_epoch_start", 1),
          ("on_train_end", None)]


@pytest.mark.parametrize("kind", ["sigint", "error", "sigterm", "requeue"])
@pytest.mark.parametrize("hook,epoch", POINTS)
def test_ema_swap_interrupted_at_every_tensor_leaves_no_mixed_checkpoint(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, uninterrupted: Any, kind: str, hook: str, epoch: int | None) -> None:
    average, training = uninterrupted
    if kind == "requeue":  # SLURM's warning signal (SIGUSR1), handled inside a SLURM job (scontrol absent: a warning)
        for name in [n for n in os.environ if n.startswith("SLURM_") or n in LAUNCH]:
            monkeypatch.delenv(name)
        monkeypatch.setenv("SLURM_JOB_ID", "4242")
        monkeypatch.setenv(REQUEUED_ENV, "")  # restored after the test: the run sets it
        monkeypatch.setenv("PATH", str(tmp_path / "no-scontrol"))
    for index in range(COPIES if kind in ("sigint", "error") else 1):  # the others only ask for a stop: one point
        root = tmp_path / f"{index}"
        injector = Injector(kind, index)
        with monkeypatch.context() as patch:
            injector.install(patch)
            averaging = callbacks.EMAWeightAveraging(decay=0.9)
            arm = Arm(injector, hook, averaging, epoch)
            expected_error = {"sigint": KeyboardInterrupt, "error": RuntimeError}.get(kind)
            if expected_error is None:
                _ema_run(root, (arm, Disarm(injector)), averaging)
            else:
                with pytest.raises(expected_error):
                    _ema_run(root, (arm, Disarm(injector)), averaging)
        assert injector.fired and arm.expected is not None, (index, hook)
        saved = load_checkpoint(next(root.rglob("last.ckpt")))
        _equal(saved["current_model_state"], arm.expected["training"], f"training weights, copy {index}")
        _equal(saved["module"], arm.expected["average"], f"averaged weights, copy {index}")
        scramble_global_rng()
        model, resumed, _ = _ema_run(tmp_path / f"{index}-resumed", ckpt_path=saved_path(root), model=fresh_model())
        _equal(weights(model), average, f"resumed average, copy {index}")
        _equal(weights(resumed.average_model.module), training, f"resumed training weights, copy {index}")


def saved_path(root: Path) -> Path:
    return next(root.rglob("last.ckpt"))


# ---------------------------------------------------------------- StochasticWeightAveraging
def _swa_run(root: Path, extra: tuple[Callback, ...] = (), swa: Any = None, ckpt_path: Any = None,
             model: Any = None) -> tuple[Any, Any]:
    swa = swa or callbacks.StochasticWeightAveraging(swa_lrs=0.02, swa_epoch_start=1)
    model = model if model is not None else make_model()
    if ckpt_path is None:
        torch.manual_seed(1)
    run = Trainer(max_epochs=3, logger=False, enable_progress_bar=False, enable_model_summary=False, device="cpu",
                  num_sanity_val_steps=0, root_dir=root, callbacks=[*extra[:1], swa, *extra[1:]])
    run.fit(model, shuffled(make_data()), ckpt_path=ckpt_path)
    return model, swa


@pytest.mark.parametrize("kind", ["sigint", "error"])
def test_swa_final_transfer_interrupted_at_every_tensor_is_whole(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    full, _ = _swa_run(tmp_path / "full")
    for index in range(4):  # the four parameter tensors take the average once, at the end of training
        root = tmp_path / f"{index}"
        injector = Injector(kind, index)
        with monkeypatch.context() as patch:
            injector.install(patch)
            swa = callbacks.StochasticWeightAveraging(swa_lrs=0.02, swa_epoch_start=1)
            arm = Arm(injector, "on_train_end", swa)
            with pytest.raises(KeyboardInterrupt if kind == "sigint" else RuntimeError):
                _swa_run(root, (arm, Disarm(injector)), swa)
        assert injector.fired and arm.expected is not None
        saved = load_checkpoint(saved_path(root))["module"]
        whole = [all(torch.equal(saved[k], arm.expected[side][k]) for k in saved) for side in ("training", "average")]
        assert any(whole), f"copy {index}: the checkpoint holds a mix of the training and the averaged weights"
        scramble_global_rng()
        model, _ = _swa_run(tmp_path / f"{index}-resumed", ckpt_path=saved_path(root), model=fresh_model())
        _equal(weights(model), weights(full), f"resumed, copy {index}")


def _norm_model(seed: int = 0) -> Any:
    """TinyNet with a BatchNorm (SWA recomputes its statistics in a pass of training_step after the
    transfer) and dropout (that pass draws from the random streams)."""
    from tests.helpers.reference import TinyNet

    class Norm(TinyNet):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(),
                                           torch.nn.Dropout(0.2), torch.nn.Linear(8, 1))
            self.interrupt_at: int | None = None  # a training_step call of the BatchNorm pass

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            if self.interrupt_at is not None and batch_idx == self.interrupt_at:  # set only once training ended
                self.interrupt_at = None
                signal.raise_signal(signal.SIGINT)
            return super().training_step(batch, batch_idx)

    torch.manual_seed(seed)
    return Norm()


class InterruptPass(Callback):
    """Listed before SWA: makes the BatchNorm pass's `batch`-th training_step raise Ctrl-C."""

    def __init__(self, batch: int) -> None:
        self.batch = batch

    def on_train_end(self, trainer: Any, module: Any) -> None:
        module.interrupt_at = self.batch


@pytest.mark.parametrize("where", ["transfer", "pass"])
def test_swa_with_batchnorm_interrupted_in_its_final_change_resumes_to_the_uninterrupted_weights(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    """The transfer, the BatchNorm pass and its step are one change: Ctrl-C in the transfer (deferred to
    its end) or in the pass leaves a checkpoint from before it, and the resume runs it whole."""
    def run(root: Path, extra: tuple[Callback, ...] = (), ckpt_path: Any = None, model: Any = None,
            swa: Any = None) -> Any:
        model = model if model is not None else _norm_model()
        if ckpt_path is None:
            torch.manual_seed(1)
        swa = swa or callbacks.StochasticWeightAveraging(swa_lrs=0.02, swa_epoch_start=1)
        run = Trainer(max_epochs=3, logger=False, enable_progress_bar=False, enable_model_summary=False, device="cpu",
                      num_sanity_val_steps=0, root_dir=root, callbacks=[*extra[:1], swa, *extra[1:]])
        data = shuffled(make_data(38), generator=torch.Generator().manual_seed(4))  # no batch of one (BatchNorm)
        run.fit(model, data, ckpt_path=ckpt_path)
        return model

    full = weights(run(tmp_path / "full"))
    # the uninterrupted run's last.ckpt (before the final change) resumes to it too: nothing is left to
    # train, and the pass draws from the loader's generator as restored
    scramble_global_rng()
    _equal(weights(run(tmp_path / "clean", ckpt_path=saved_path(tmp_path / "full"), model=_norm_model(777))), full,
           "resumed from the end of training")
    for index in range(2):  # a copy of the transfer, or a batch of the pass
        root = tmp_path / f"{index}"
        if where == "transfer":
            injector = Injector("sigint", index)
            with monkeypatch.context() as patch:
                injector.install(patch)
                swa = callbacks.StochasticWeightAveraging(swa_lrs=0.02, swa_epoch_start=1)
                with pytest.raises(KeyboardInterrupt):
                    run(root, (Arm(injector, "on_train_end", swa), Disarm(injector)), swa=swa)
            assert injector.fired
        else:
            with pytest.raises(KeyboardInterrupt):
                run(root, (InterruptPass(index + 1),))
        scramble_global_rng()
        resumed = run(tmp_path / f"{index}-resumed", ckpt_path=saved_path(root), model=_norm_model(777))
        _equal(weights(resumed), full, f"{where}: resumed after an interrupt at {index}")
