"""The UvA deep-learning course's notebooks 01-03 ported to `Trainer(...).fit`: each port trains,
under this package and under Lightning in one process, to the weights of the notebook's own
hand-written loop (`torch.equal`), with the same validation scores, best checkpoint and test
accuracy (tests/helpers/tutorials/uva_intro.py: the notebooks; tests/helpers/lightning_projects/
uva_intro.py: the ports).

Notebook 03's optimizers are plain classes, not `torch.optim.Optimizer`: returned from
`configure_optimizers` both frameworks refuse them (ours naming the two fixes); kept on the
module under manual optimization, or rewritten as `torch.optim.Optimizer` subclasses, they train
to the notebook's weights (docs/manual_optimization.md, "An optimizer of your own").
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from lightning.pytorch.utilities.exceptions import MisconfigurationException

from tests.helpers.lightning_projects import assert_same_weights, load_project
from tests.helpers.tutorials import uva_intro as notebook
from trainer.loops.optimizers import parse_optimizers


@pytest.fixture(scope="module")
def ports() -> dict[str, Any]:
    return {"ours": load_project("uva_intro", "ours"), "lightning": load_project("uva_intro", "lightning")}


def both(ports: dict[str, Any], main: str, root: Path, *args: Any, **kwargs: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Lightning's own notes (srun, deprecations), not under test
        return tuple(getattr(ports[fw], main)(root / fw, *args, **kwargs) for fw in ("ours", "lightning"))  # type: ignore[return-value]


def test_01_xor_classifier(ports: dict[str, Any], tmp_path: Path) -> None:
    ours, theirs = both(ports, "xor_main", tmp_path, num_epochs=4)
    model, accuracy = notebook.xor_notebook(num_epochs=4)
    assert_same_weights(ours["model"], model)
    assert_same_weights(ours["model"], theirs["model"])
    assert ours["trainer"].global_step == theirs["trainer"].global_step == 4 * 2
    assert ours["test"] == theirs["test"] == {"test_acc": accuracy}


def test_01_the_comparison_can_fail(ports: dict[str, Any], tmp_path: Path) -> None:
    with pytest.raises(AssertionError, match="differ"):
        assert_same_weights(ports["ours"].xor_main(tmp_path, num_epochs=3)["model"], notebook.xor_notebook(num_epochs=4)[0])


@pytest.mark.parametrize("act_fn_name", ["sigmoid", "tanh", "elu"])
def test_02_activation_functions_with_checkpoint_and_early_stopping(act_fn_name: str, ports: dict[str, Any], tmp_path: Path) -> None:
    """`ModelCheckpoint(monitor="val_acc", mode="max")` and `EarlyStopping(patience=2)` are the
    notebook's "save when strictly better, stop after `patience` epochs without": same epochs
    trained, same best epoch, same best weights and test accuracy. Sigmoid stops after its first
    epoch's best, tanh trains on, elu ties (not an improvement) on the way."""
    ours, theirs = both(ports, "activation_main", tmp_path, act_fn_name, max_epochs=8, patience=2)
    run = notebook.activation_notebook(act_fn_name, str(tmp_path / "notebook"), max_epochs=8, patience=2)
    assert_same_weights(ours["last"], run["last"])
    assert_same_weights(ours["net"], run["net"])  # the best model, loaded for the test
    assert_same_weights(ours["net"], theirs["net"])
    assert ours["trainer"].current_epoch == theirs["trainer"].current_epoch == len(run["val_scores"])
    assert (ours["stopped_epoch"] > 0) == (theirs["stopped_epoch"] > 0) == (len(run["val_scores"]) < 8)
    assert ours["best"] == theirs["best"] == f"epoch={run['best_epoch']}-step={(run['best_epoch'] + 1) * 24}.ckpt"
    assert ours["best_score"] == theirs["best_score"] == max(run["val_scores"])
    assert ours["test"] == theirs["test"] == {"test_acc": run["test_acc"]}


def test_02_the_runs_cover_an_early_stop_and_a_tie(tmp_path: Path) -> None:
    """The cases above are what they claim to be (other data could change them)."""
    sigmoid = notebook.activation_notebook("sigmoid", str(tmp_path), 8, 2)["val_scores"]
    elu = notebook.activation_notebook("elu", str(tmp_path), 8, 2)["val_scores"]
    assert len(sigmoid) < 8 and len(elu) == 8
    assert any(elu[i] == max(elu[:i]) for i in range(1, len(elu)))


@pytest.mark.parametrize(("way", "optimizer_name"), [("torch", name) for name in notebook.OPTIMIZERS] + [("manual", "Adam")])
def test_03_the_notebooks_optimizers(way: str, optimizer_name: str, ports: dict[str, Any], tmp_path: Path) -> None:
    ours, theirs = both(ports, "optimizer_main", tmp_path, optimizer_name, way, max_epochs=3)
    run = notebook.optimizer_notebook(notebook.init_base_model(), optimizer_name, str(tmp_path / "notebook"), max_epochs=3)
    assert_same_weights(ours["last"], run["last"])
    assert_same_weights(ours["last"], theirs["last"])
    assert ours["model"].train_losses == theirs["model"].train_losses == run["train_losses"]
    assert ours["val_scores"] == theirs["val_scores"] == run["val_scores"]
    if way == "torch":
        assert_same_weights(ours["net"], run["net"])  # the best model, loaded for the test
        assert ours["trainer"].global_step == theirs["trainer"].global_step == 3 * 24
        assert ours["best"] == theirs["best"] == f"epoch={run['best_epoch']}-step={(run['best_epoch'] + 1) * 24}.ckpt"
        assert ours["test"] == theirs["test"] == {"test_acc": run["test_acc"]}
    else:  # the Trainer never saw a step: no checkpoint, the last weights tested
        assert ours["trainer"].global_step == theirs["trainer"].global_step == 0
        assert ours["best"] == theirs["best"] == ""
        assert ours["test"] == theirs["test"]
        said = [w for w in ours["warnings"] if "returned None" in w]
        assert len(said) == 1 and "global_step stays 0" in said[0] and "ModelCheckpoint" in said[0]
        assert "weights do not change" not in said[0]


def test_03_the_notebooks_optimizer_returned_as_is_is_refused_with_the_fix(ports: dict[str, Any], tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"returned Adam, an optimizer that is not a torch\.optim\.Optimizer") as error:
        ports["ours"].optimizer_main(tmp_path / "ours", "Adam", "template")
    assert "subclass torch.optim.Optimizer" in str(error.value) and "automatic_optimization = False" in str(error.value)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(MisconfigurationException, match="Unknown configuration for model optimizers"):
            ports["lightning"].optimizer_main(tmp_path / "lightning", "Adam", "template")


@pytest.mark.parametrize("form", ["alone", "list", "dict", "lists", "with_scheduler_dict"])
def test_a_hand_written_optimizer_is_named_in_every_return_form(form: str) -> None:
    opt = notebook.SGDMomentum([torch.nn.Parameter(torch.zeros(2))], lr=0.1, momentum=0.9)
    returned = {"alone": opt, "list": [opt], "dict": {"optimizer": opt}, "lists": ([opt], []),
                "with_scheduler_dict": [{"optimizer": opt, "lr_scheduler": None}]}[form]
    with pytest.raises(ValueError, match="returned SGDMomentum, an optimizer that is not a torch.optim.Optimizer"):
        parse_optimizers(returned)


def test_a_scheduler_is_not_mistaken_for_an_optimizer() -> None:
    """A scheduler has step() but no zero_grad(): `(optimizer, scheduler)` stays accepted."""
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=0.1)
    setup = parse_optimizers((opt, torch.optim.lr_scheduler.StepLR(opt, 1)))
    assert setup.optimizers == [opt] and len(setup.schedulers) == 1
