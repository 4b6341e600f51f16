"""intermediate_source/optimizer_step_in_backward_tutorial.py, ported to a LightningModule with
this package's imports (tests/helpers/tutorials/optimizer_step_in_backward.py).

The tutorial steps one Adam per parameter from `register_post_accumulate_grad_hook` hooks, so
there is no `optimizer.step()` in its loop. Two ports train to its weights (`torch.equal`), here
and under Lightning in one process: its code as it is, with `configure_optimizers` registering
the hooks and returning None (the Trainer runs backward, the hooks step); and manual
optimization, with the per-parameter optimizers returned (their states in checkpoints) and
stepped from the hooks through `self.optimizers()` (docs/manual_optimization.md, "Optimizer
steps inside backward").
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch

from tests.examples.conftest import one_thread  # noqa: F401  (small ops: one intra-op thread)
from tests.helpers.lightning_projects import assert_same_weights, load_file
from tests.helpers.tutorials import optimizer_step_in_backward as tutorial

SOURCE = Path(tutorial.__file__)
pytestmark = pytest.mark.usefixtures("one_thread")


def test_both_ports_train_to_the_tutorials_weights_here_and_under_lightning(tmp_path: Path) -> None:
    reference = tutorial.original()
    ours = load_file(SOURCE, "ours")
    with pytest.warns(UserWarning, match="returned None") as said:
        hooks = ours.main("hooks")
    manual = ours.main("manual")
    assert_same_weights(hooks["model"], reference)
    assert_same_weights(manual["model"], reference)
    parameters = len(list(reference.parameters()))
    assert (hooks["trainer"].global_step, manual["trainer"].global_step) == (tutorial.STEPS, tutorial.STEPS * parameters)
    manual["trainer"].save_checkpoint(tmp_path / "fused.ckpt")
    states = torch.load(tmp_path / "fused.ckpt", weights_only=True)["optimizer_states"]
    assert [state["state"][0]["step"].item() for state in states] == [tutorial.STEPS] * parameters
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = load_file(SOURCE, "lightning")
        for way in ("hooks", "manual"):
            assert_same_weights(theirs.main(way)["model"], reference)
    # the hooks changed the weights: the warning must not say that they stay as they are
    message = str(said[0].message)
    assert "do not change" not in message and "hooks" in message


@pytest.mark.parametrize("precision", ["bf16", "amp"])
def test_the_manual_port_in_mixed_precision(precision: str) -> None:
    """Stepped through `self.optimizers()`, each hook's step goes through the precision: under
    amp a `scaler.step` on the unscaled gradients of that parameter, one `scaler.update()` when
    `training_step` returns, as the hand-written loop with a GradScaler does."""
    run = load_file(SOURCE, "ours").main("manual", precision=precision)
    assert_same_weights(run["model"], tutorial.original(precision))


def test_the_hooks_port_under_amp_is_refused_with_the_recipe() -> None:
    """Under amp the tutorial's own form would step on scaled gradients, and at the Trainer's
    step no gradient is left for the GradScaler to check: the error names the cause and the
    manual form (PyTorch's own message is a bare "No inf checks were recorded")."""
    with pytest.warns(UserWarning, match="returned None"), \
            pytest.raises(ValueError, match=r"no gradient.*self\.optimizers\(\).*Optimizer steps inside backward"):
        load_file(SOURCE, "ours").main("hooks", precision="amp")


def test_the_comparison_can_fail() -> None:
    model = load_file(SOURCE, "ours").main("manual")["model"]
    with pytest.raises(AssertionError, match="differ"):
        assert_same_weights(model, tutorial.Net())
