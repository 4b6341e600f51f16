"""pytorch/tutorials' ports (tests/tutorials/) on a GPU, as the tutorials run there: the model
moved to CUDA, each batch moved in the loop (quickstart), by the loader wrapper's
`preprocess` (nn_tutorial's "Using your GPU"), or made on the device (the AMP recipe, with
CUDA's autocast and GradScaler). The ports on `device="cuda"` equal the loops bit for bit."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tests.gpu._references import GPU, QUIET
from tests.helpers.reference import assert_same_weights
from tests.helpers.tutorials import amp_recipe, nn_tutorial, quickstart
from trainer import Trainer

pytestmark = GPU
ON_CUDA: dict[str, Any] = dict(QUIET, device="cuda", num_sanity_val_steps=0)


@pytest.mark.parametrize("precision", ["fp32", "amp", "bf16"])
def test_quickstart_on_cuda(precision: str) -> None:
    torch.manual_seed(0)
    model = quickstart.NeuralNetwork()
    train_dataloader, test_dataloader = quickstart.fashion_mnist_like()
    Trainer(precision=precision, max_epochs=3, **ON_CUDA).fit(
        model, train_dataloader, test_dataloader)
    reference = quickstart.original(precision, device="cuda")
    assert_same_weights(model, reference)
    assert model.printed == reference.printed


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_nn_tutorial_preprocess_moves_the_batches(precision: str) -> None:
    model, train_dl, valid_dl = nn_tutorial.make("wrapped", "cuda")
    Trainer(precision=precision, max_epochs=nn_tutorial.EPOCHS, **ON_CUDA).fit(model, train_dl, valid_dl)
    reference = nn_tutorial.original_fit("wrapped", precision, "cuda")
    assert_same_weights(model, reference)
    assert model.printed == reference.printed


@pytest.mark.parametrize(("precision", "clip"), [("fp32", None), ("amp", None), ("amp", 0.1), ("bf16", 0.1)])
def test_amp_recipe_on_cuda(precision: str, clip: float | None) -> None:
    torch.manual_seed(0)
    net = amp_recipe.Net()
    trainer = Trainer(precision=precision, max_epochs=amp_recipe.EPOCHS, gradient_clip_val=clip, **ON_CUDA)
    trainer.fit(net, amp_recipe.data("cuda"))
    reference, scaler = amp_recipe.original(precision, clip, device="cuda")
    assert_same_weights(net, reference)
    if precision == "amp":
        assert float(trainer.precision.scaler.get_scale()) == scaler.get_scale()  # type: ignore[attr-defined]
