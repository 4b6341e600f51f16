"""Every callback and logger with a Lightning counterpart accepts Lightning's whole signature
written out with Lightning's defaults (what Hydra configs and LightningCLI dumps list), and
the values it keeps under Lightning's names are Lightning's. The list of classes comes from
our `callbacks.__all__` and `trainer.loggers.__all__`, so a new one is checked too."""

from __future__ import annotations

import datetime
import inspect
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

import callbacks
import trainer.loggers as our_loggers

pytest.importorskip("lightning")
import lightning.pytorch.callbacks as their_callbacks  # noqa: E402
import lightning.pytorch.loggers as their_loggers  # noqa: E402

#: Values for Lightning's parameters that have no default (given alike to both).
REQUIRED_FOLDER = object()  # a folder under the test's tmp_path
REQUIRED: dict[str, Any] = {"monitor": "val_loss", "swa_lrs": 0.01, "scheduling": {0: 2, 2: 1}, "batch_size_fn": len,
                            "dirpath": REQUIRED_FOLDER, "save_dir": REQUIRED_FOLDER}
#: Documented in docs/lightning.md as not provided here (constructing it says what to do instead).
NOT_PROVIDED = {"BatchSizeFinder"}
ABSTRACT = {"Logger"}  # a base class with nothing to construct
QUIET = {"logger": False, "enable_progress_bar": False, "enable_model_summary": False}


def _pairs() -> list[tuple[str, type, type]]:
    found = [(name, getattr(callbacks, name), getattr(their_callbacks, name)) for name in callbacks.__all__
             if hasattr(their_callbacks, name)]
    found += [(name, getattr(our_loggers, name), getattr(their_loggers, name)) for name in our_loggers.__all__
              if hasattr(their_loggers, name) and isinstance(getattr(our_loggers, name), type)]
    return [pair for pair in found if pair[0] not in ABSTRACT]


def lightning_defaults(cls: type, folder: Path) -> dict[str, Any]:
    """Every parameter of Lightning's `cls.__init__`, set to its default (or a sample value when
    it has none); folders point into `folder`."""
    arguments: dict[str, Any] = {}
    for name, parameter in list(inspect.signature(cls.__init__).parameters.items())[1:]:
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        arguments[name] = REQUIRED[name] if parameter.default is parameter.empty else parameter.default
    if "save_dir" in arguments:  # loggers write here (never into the working directory)
        arguments["save_dir"] = str(folder / "save_dir")
    if arguments.get("dirpath", None) is REQUIRED_FOLDER:
        arguments["dirpath"] = str(folder / "dirpath")
    return arguments


def _build(cls: type, arguments: dict[str, Any]) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return cls(**arguments)


def _plain(value: Any) -> Any:
    return str(value) if isinstance(value, Path) else value


@pytest.mark.parametrize("name,ours,theirs", _pairs(), ids=[pair[0] for pair in _pairs()])
def test_lightning_defaults_written_out_are_accepted(name: str, ours: type, theirs: type, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # Lightning's MLFlowLogger opens its store when built
    arguments = lightning_defaults(theirs, tmp_path)
    monkeypatch.setenv("WANDB_MODE", "offline")
    try:
        other = _build(theirs, dict(arguments))
    except ImportError:  # Lightning needs an optional package here (rich, wandb, ...): so do we
        with pytest.raises(ImportError):
            _build(ours, dict(arguments))
        return
    except Exception:  # noqa: BLE001 - Lightning's needs more than this machine has (W&B credentials): ours is built lazily
        other = None
    if name in NOT_PROVIDED:
        with pytest.raises(ValueError, match="not offered"):
            _build(ours, dict(arguments))
        return
    mine = _build(ours, dict(arguments))
    # An argument Lightning keeps as given under its own name, ours keeps as given too.
    kept = [p for p, value in arguments.items() if other is not None and _same(getattr(other, p, _MISSING), value)]
    assert {p: _plain(getattr(mine, p, _MISSING)) for p in kept} == {p: _plain(arguments[p]) for p in kept}


_MISSING = object()


def _same(kept: Any, given: Any) -> bool:
    if isinstance(kept, (Path, str)) and isinstance(given, (Path, str)):
        return str(kept) == str(given)
    return type(kept) is type(given) and not callable(given) and kept == given


def test_model_checkpoint_train_time_interval_saves_as_lightnings(tmp_path: Path) -> None:
    """train_time_interval=timedelta(0): a save after every optimizer step, and no epoch saves
    unless asked (Lightning's every_n_epochs default is 0 then): the same files."""
    import lightning.pytorch as pl

    from lightning.pytorch.demos.boring_classes import BoringModel as TheirBoring

    import trainer
    from trainer.demos.boring_classes import BoringModel as OurBoring

    def files(framework: Any, checkpoint_class: type, module: Any, folder: Path) -> list[str]:
        checkpoint = checkpoint_class(dirpath=folder / "files", train_time_interval=datetime.timedelta(0), save_top_k=-1)
        framework.Trainer(max_epochs=2, limit_train_batches=3, limit_val_batches=0, callbacks=[checkpoint],
                          default_root_dir=folder, **QUIET).fit(module)
        return sorted(path.name for path in (folder / "files").iterdir())

    ours = files(trainer, callbacks.ModelCheckpoint, OurBoring(), tmp_path / "ours")
    theirs = files(pl, their_callbacks.ModelCheckpoint, TheirBoring(), tmp_path / "theirs")
    assert ours == theirs and len(ours) == 6


def test_model_checkpoint_save_on_exception_writes_lightnings_file(tmp_path: Path) -> None:
    import lightning.pytorch as pl

    from lightning.pytorch.demos.boring_classes import BoringModel

    import trainer
    from trainer.demos.boring_classes import BoringModel as OurBoring

    class Fails(OurBoring):
        def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
            if self.global_step == 2:
                raise RuntimeError("boom")

    class FailsToo(BoringModel):
        def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
            if self.global_step == 2:
                raise RuntimeError("boom")

    names = []
    for framework, checkpoint_class, module, folder in ((trainer, callbacks.ModelCheckpoint, Fails(), tmp_path / "ours"),
                                                       (pl, their_callbacks.ModelCheckpoint, FailsToo(), tmp_path / "theirs")):
        checkpoint = checkpoint_class(dirpath=folder / "files", save_on_exception=True, every_n_epochs=0)
        with pytest.raises(RuntimeError, match="boom"):
            framework.Trainer(max_epochs=1, limit_train_batches=5, limit_val_batches=0, callbacks=[checkpoint],
                              default_root_dir=folder, **QUIET).fit(module)
        names.append(sorted(path.name for path in (folder / "files").iterdir()))
    assert names[0] == names[1] == ["epoch=0-step=2.ckpt"]


def test_lambda_callback_hooks_given_as_none_are_no_hooks() -> None:
    hooks = {name: None for name in list(inspect.signature(their_callbacks.LambdaCallback.__init__).parameters)[1:]}
    seen: list[int] = []
    callback = callbacks.LambdaCallback(**{**hooks, "on_train_epoch_end": lambda trainer, module: seen.append(1)})
    assert callback.hooks.keys() == {"on_train_epoch_end"}


@pytest.mark.parametrize("options", [{"save_top_k": -1, "every_n_train_steps": 2}, {}, {"save_top_k": 0}])
def test_model_checkpoint_save_last_link_makes_lightnings_symlink(options: dict[str, Any], tmp_path: Path) -> None:
    """save_last="link": last.ckpt is a relative symlink to the newest top-k file, as Lightning's."""
    import os

    import lightning.pytorch as pl
    from lightning.pytorch.demos.boring_classes import BoringModel as TheirBoring

    import trainer
    from trainer.demos.boring_classes import BoringModel as OurBoring

    seen = []
    for framework, checkpoint_class, module, folder in ((trainer, callbacks.ModelCheckpoint, OurBoring(), tmp_path / "ours"),
                                                       (pl, their_callbacks.ModelCheckpoint, TheirBoring(), tmp_path / "theirs")):
        checkpoint = checkpoint_class(dirpath=folder / "files", save_last="link", **options)
        framework.Trainer(max_epochs=2, limit_train_batches=3, limit_val_batches=0, callbacks=[checkpoint],
                          default_root_dir=folder, **QUIET).fit(module)
        link = folder / "files" / "last.ckpt"
        seen.append((sorted(p.name for p in (folder / "files").iterdir()), link.is_symlink(),
                     os.readlink(link) if link.is_symlink() else None))
    assert seen[0] == seen[1] and seen[0][1] == (options.get("save_top_k") != 0)


@pytest.mark.parametrize("name,ours,theirs", _pairs(), ids=[pair[0] for pair in _pairs()])
def test_positional_arguments_mean_what_they_mean_in_lightning(name: str, ours: type, theirs: type) -> None:
    """`WandbLogger("run")` names the run in Lightning; a positional argument Lightning takes
    must land on the same parameter here."""
    def positional(cls: type) -> list[str]:
        kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        return [n for n, p in list(inspect.signature(cls.__init__).parameters.items())[1:] if p.kind in kinds]

    same = {"root_dir": "save_dir"}  # our name of Lightning's first argument: the same folder
    mine, other = [same.get(n, n) for n in positional(ours)], positional(theirs)
    shared = min(len(mine), len(other))
    assert mine[:shared] == other[:shared], f"{name}: ours {mine}, Lightning's {other}"
