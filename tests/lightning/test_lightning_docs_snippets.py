"""Lightning's documentation snippets, as users copy them, run under Lightning 2.6 and under this
package (imports changed only) in one process: the same weights (`torch.equal`), steps, epochs,
metrics, learning rates, checkpoint files, hyperparameters and what the snippets print or read
back (tests/helpers/lightning_projects/docs_snippets.py holds the completed snippets).

Where Lightning fails on its own snippet: `return optimizer, scheduler` runs here (the
comparison uses Lightning's `[optimizer], [scheduler]`); the page's `configure_gradient_clipping`
that doubles the Trainer's value is refused by both.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from lightning.pytorch.utilities.exceptions import MisconfigurationException

from tests.helpers.lightning_projects import assert_same_weights, load_project


@pytest.fixture(scope="module")
def snippets() -> dict[str, Any]:
    return {"ours": load_project("docs_snippets", "ours"), "lightning": load_project("docs_snippets", "lightning")}


def both(snippets: dict[str, Any], run: str, root: Path, *args: Any, **kwargs: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Lightning's notes (srun, deprecations), not under test
        ours, theirs = (getattr(snippets[fw], run)(root / fw, *args, **kwargs) for fw in ("ours", "lightning"))
    return ours, theirs


def metrics(result: dict[str, Any]) -> dict[str, float]:
    return {key: float(value) for key, value in result["trainer"].callback_metrics.items()}


def assert_same(ours: dict[str, Any], theirs: dict[str, Any], *extra: str) -> None:
    assert_same_weights(ours["model"], theirs["model"])
    assert ours["trainer"].global_step == theirs["trainer"].global_step > 0
    assert ours["trainer"].current_epoch == theirs["trainer"].current_epoch
    lightning = metrics(theirs)
    assert lightning and {key: metrics(ours).get(key) for key in lightning} == lightning
    for key in extra:
        assert ours[key] == theirs[key], key


@pytest.mark.parametrize("name", ["minimal", "accumulation", "clipping", "gan", "gan_alternating", "schedulers",
                                  "plateau", "lbfgs"])
def test_manual_optimization_page(name: str, snippets: dict[str, Any], tmp_path: Path) -> None:
    """"schedulers" steps on `self.trainer.is_last_batch` inside training_step: True there for
    the epoch's last batch, as in Lightning."""
    ours, theirs = both(snippets, "run_manual", tmp_path, name)
    assert_same(ours, theirs, "lrs")


@pytest.mark.parametrize("name", ["scheduler_dict", "stronger_clipping", "unwrapped_step", "own_scheduler"])
def test_optimization_page(name: str, snippets: dict[str, Any], tmp_path: Path) -> None:
    ours, theirs = both(snippets, "run_optimization", tmp_path, name)
    assert_same(ours, theirs, "lrs")


def test_onecycle_from_estimated_stepping_batches(snippets: dict[str, Any], tmp_path: Path) -> None:
    """The page returns `optimizer, scheduler`: refused by Lightning 2.6, accepted here, and
    the same run as Lightning's `[optimizer], [scheduler]`."""
    ours = snippets["ours"].run_optimization(tmp_path / "ours", "one_cycle")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(MisconfigurationException):
            snippets["lightning"].run_optimization(tmp_path / "refused", "one_cycle")
        theirs = snippets["lightning"].run_optimization(tmp_path / "lightning", "one_cycle", lists=True)
    assert_same(ours, theirs, "lrs")


def test_stronger_clipping_after_an_epoch_is_refused_as_by_lightning(snippets: dict[str, Any], tmp_path: Path) -> None:
    """The page's `configure_gradient_clipping` doubles the Trainer's value from some epoch on:
    Lightning 2.6 raises for a value other than `Trainer(gradient_clip_val=...)`, and so does
    this package, when that epoch comes (the snippet works without the Trainer's value)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(MisconfigurationException, match="Please use only one of them"):
            snippets["lightning"].run_optimization(tmp_path / "lightning", "stronger_clipping", after_epoch=1)
    with pytest.raises(ValueError, match=r"gradient_clip_val=0\.01\) and clip_gradients\(gradient_clip_val=0\.02\) disagree"):
        snippets["ours"].run_optimization(tmp_path / "ours", "stronger_clipping", after_epoch=1)


@pytest.mark.parametrize("name", ["patience", "threshold", "subclass"])
def test_early_stopping_page(name: str, snippets: dict[str, Any], tmp_path: Path) -> None:
    """`stopping_reason` (`EarlyStoppingReason`) read as the page does, and the page's
    `MyEarlyStopping`: `on_validation_end` overridden with `pass` turns off the checks at
    validation's end (validation twice an epoch), `_run_early_stopping_check` from `on_train_end`
    checks once at the end."""
    ours, theirs = both(snippets, "run_early_stopping", tmp_path, name)
    assert_same(ours, theirs, "printed", "stopped_epoch", "wait_count")
    assert (ours["message"] is None) == (theirs["message"] is None)
    assert ours["state"]["stopping_reason"] == theirs["state"]["stopping_reason"]
    stopped = ours["printed"] != ["Training completed normally without early stopping"]
    assert stopped == (ours["trainer"].current_epoch < 4) == (name != "subclass")


def test_model_checkpoint_top_k_paths_and_a_printing_callback(snippets: dict[str, Any], tmp_path: Path) -> None:
    ours, theirs = both(snippets, "run_top_k", tmp_path)
    assert_same(ours, theirs, "files", "best", "last", "best_k", "printed")
    assert len(ours["files"]) == 2 and ours["printed"] == ["Training is starting", "Training is ending"]


def test_save_checkpoint_load_from_checkpoint_and_own_entries(snippets: dict[str, Any], tmp_path: Path) -> None:
    ours, theirs = both(snippets, "run_save_and_load", tmp_path)
    assert_same(ours, theirs, "hparams", "changed", "saved_hparams", "cool", "module_loaded", "callback_loaded",
                "resumed_step")
    assert_same_weights(ours["new_model"], ours["model"])
    assert_same_weights(ours["resumed"], theirs["resumed"])
    assert ours["changed"]["learning_rate"] == 0.05 and ours["hparams"]["learning_rate"] == 0.1


def test_strict_loading_false_with_a_state_dict_that_leaves_the_encoder_out(snippets: dict[str, Any], tmp_path: Path) -> None:
    """The checkpoint holds the decoder only; the resume loads it non-strictly and trains on."""
    ours, theirs = both(snippets, "run_strict_loading", tmp_path)
    assert ours["saved_keys"] == theirs["saved_keys"] == ["decoder.bias", "decoder.weight"]
    assert_same_weights(ours["weights"], theirs["weights"])
    assert ours["trainer"].global_step == theirs["trainer"].global_step == 8


def test_evaluation_page_test_calls_with_three_test_loaders(snippets: dict[str, Any], tmp_path: Path) -> None:
    """The module's three test loaders, `add_dataloader_idx` both ways, outputs kept per loader
    for `on_test_epoch_end`, and `trainer.test` with "best", a path and the model: Lightning's
    numbers. "last" is the fit's last weights here, Lightning's `ModelCheckpoint` last copy there
    (docs/lightning.md, "Where we differ on purpose")."""
    ours, theirs = both(snippets, "run_evaluation", tmp_path)
    assert_same(ours, theirs, "best")
    for key in ("final", "best", "last_model_path", "path", "model"):
        assert len(theirs["results"][key]) == 3
        assert ours["results"][key] == theirs["results"][key], key
    assert ours["results"]["last"] == ours["results"]["final"]
    assert theirs["results"]["last"] == theirs["results"]["last_model_path"]
    assert ours["results"]["last"] != ours["results"]["last_model_path"]  # the run exercises the difference


def test_the_logging_pages_custom_logger(snippets: dict[str, Any], tmp_path: Path) -> None:
    """`from ...loggers.logger import Logger, rank_zero_experiment`, `@rank_zero_only` methods:
    every `log_metrics` is followed by `save()`, and `finalize("success")` ends fit and the
    validate after it, as in Lightning; the user's names are logged (the values and steps are
    compared by the other logging tests; this package also writes its own `train/...` scalars)."""
    ours, theirs = both(snippets, "run_custom_logger", tmp_path)
    assert_same(ours, theirs, "experiment")
    for calls in (ours["calls"], theirs["calls"]):
        writes = [i for i, call in enumerate(calls) if call[0] == "log_metrics"]
        assert writes and all(calls[i + 1] == ("save",) for i in writes)
    finals = [[call for call in result["calls"] if call[0] == "finalize"] for result in (ours, theirs)]
    assert finals[0] == finals[1] == [("finalize", "success")] * 2

    def names(calls: list[Any]) -> set[str]:
        return {name for call in calls if call[0] == "log_metrics" for name in call[1] if not name.startswith("train/")}

    assert names(ours["calls"]) == names(theirs["calls"]) == {"epoch", "my_loss_step", "my_loss_epoch", "val_loss"}


def test_a_logger_is_finalized_as_failed_when_fit_raises(snippets: dict[str, Any], tmp_path: Path) -> None:
    class Failing(snippets["ours"].LoggingModel):  # type: ignore[name-defined,misc]
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            if self.global_step == 2:
                raise RuntimeError("boom")
            return super().training_step(batch, batch_idx)

    logger = snippets["ours"].MyLogger()
    with pytest.raises(RuntimeError, match="boom"):
        snippets["ours"].fit(Failing(), tmp_path, logger=logger)
    assert [call for call in logger.calls if call[0] == "finalize"] == [("finalize", "failed")]


def test_a_progress_bar_subclass_from_the_docs_is_told_its_override_does_nothing(snippets: dict[str, Any]) -> None:
    """The progress-bar page customises the bar by overriding `get_metrics` and
    `init_validation_tqdm`; Lightning calls them, the Trainer here never does: a warning says so
    when the bar is built (and a plain bar, or one overriding only callback hooks, gets none)."""
    from callbacks import TQDMProgressBar

    class CustomProgressBar(TQDMProgressBar):
        def get_metrics(self, *args: Any, **kwargs: Any) -> Any:
            items = super().get_metrics(*args, **kwargs)  # type: ignore[misc]
            items.pop("v_num", None)
            return items

    class LitProgressBar(TQDMProgressBar):
        def init_validation_tqdm(self) -> Any:
            bar = super().init_validation_tqdm()  # type: ignore[misc]
            bar.set_description("running validation...")
            return bar

    class Hooks(TQDMProgressBar):
        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            pass

    for bar, method in ((CustomProgressBar, "get_metrics"), (LitProgressBar, "init_validation_tqdm")):
        with pytest.warns(UserWarning, match=rf"{bar.__name__} overrides {method}, which .* never does"):
            bar()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        TQDMProgressBar(refresh_rate=10), TQDMProgressBar(leave=True), Hooks()
