"""`trainer.state.fn`, `.stage`, `.status` and `.finished`, read from the hooks of a fit, validate,
test and predict, and after a call that raised, are Lightning's values; the names import from
Lightning's path (`trainer.trainer.states`)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

pytest.importorskip("lightning")

HOOKS = ("setup", "on_fit_start", "on_train_start", "training_step", "validation_step", "test_step",
         "predict_step", "on_fit_end", "teardown")


def seen(state: Any) -> tuple[str, str, str]:
    return str(state.fn), str(state.stage), str(state.status)


def record(pkg: Any, fail: bool) -> list[tuple[Any, ...]]:
    log: list[tuple[Any, ...]] = []

    class Model(pkg.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    def hook(name: str) -> Any:
        def run(self: Any, *args: Any, **kwargs: Any) -> Any:
            log.append((name, *seen(self.trainer.state)))
            if name == "training_step":
                if fail and self.trainer.global_step == 1:
                    raise RuntimeError("stop here")
                return self.layer(args[0][0]).sum()
            return 1 if name == "predict_step" else None
        return run

    for name in HOOKS:
        setattr(Model, name, hook(name))
    loader = DataLoader(TensorDataset(torch.randn(4, 2)), batch_size=2)
    trainer = pkg.Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                          enable_model_summary=False)
    log.append(("created", *seen(trainer.state), trainer.state.finished))
    model = Model()
    if fail:
        with pytest.raises(RuntimeError, match="stop here"):
            trainer.fit(model, loader, loader)
        log.append(("raised", *seen(trainer.state), trainer.state.finished, trainer.state.stopped))
        return log
    trainer.fit(model, loader, loader)
    log.append(("fitted", *seen(trainer.state), trainer.state.finished, trainer.state.stopped))
    trainer.validate(model, loader, verbose=False)
    log.append(("validated", *seen(trainer.state)))
    trainer.test(model, loader, verbose=False)
    trainer.predict(model, loader)
    log.append(("predicted", *seen(trainer.state), trainer.state.finished))
    return log


@pytest.mark.parametrize("fail", [False, True], ids=["finished", "raised"])
def test_state_matches_lightning(fail: bool) -> None:
    import lightning.pytorch as lightning

    import trainer

    ours, theirs = record(trainer, fail), record(lightning, fail)
    if fail:  # teardown runs here after a failed fit too (docs/hooks.md); Lightning skips it
        assert [entry[0] for entry in ours[-2:]] == ["teardown", "raised"]
        ours = ours[:-2] + ours[-1:]
    assert ours == theirs
    assert any(entry[2] == "RunningStage.SANITY_CHECKING" for entry in ours)


def test_state_names_on_lightnings_path() -> None:
    from lightning.pytorch.trainer import states as lightning_states

    from trainer.trainer.states import RunningStage, TrainerFn, TrainerStatus

    for ours in (RunningStage, TrainerFn, TrainerStatus):
        theirs = getattr(lightning_states, ours.__name__)
        assert [(m.name, m.value) for m in ours] == [(m.name, m.value) for m in theirs]
    assert TrainerFn.FITTING == "fit" and TrainerFn.FITTING == "FIT" and RunningStage.TRAINING != "fit"
    assert RunningStage.SANITY_CHECKING.dataloader_prefix == "val" and RunningStage.SANITY_CHECKING.evaluating
    assert TrainerStatus.INTERRUPTED.stopped and not TrainerStatus.RUNNING.stopped


def test_the_state_view_is_built_once_per_run_state() -> None:
    """Callbacks read `trainer.state` per batch: one view object, not one per read."""
    from trainer import Trainer as Ours

    run_trainer = Ours(max_epochs=1, logger=False)
    assert run_trainer.state is run_trainer.state
    assert run_trainer.state.epoch == 0 and run_trainer.state.stage is None
