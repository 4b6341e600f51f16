"""The Trainer on a GPU equals the hand-written CUDA loop bit for bit (deterministic settings,
tests/gpu/conftest.py): fp32, amp and bf16, with accumulation and clipping, with a validation
loader, and across a mid-epoch resume (which restores the CUDA RNG the dropout draws from)."""

from __future__ import annotations

import pytest
import torch

from tests.gpu._references import CUDA, GPU, QUIET, SaveAt, cuda_fit
from tests.helpers.reference import assert_same_weights, loader, make_data, make_model
from trainer import Trainer

pytestmark = GPU


@pytest.mark.parametrize("precision", ["fp32", "amp", "bf16"])
def test_weights_equal_the_hand_written_cuda_loop(precision):
    data = make_data()
    reference = make_model()  # dropout 0.1: the CUDA RNG is drawn from every step
    torch.manual_seed(1)
    cuda_fit(reference, loader(data), precision=precision, accumulate=3, clip=1.0, epochs=2)
    ours = make_model()
    torch.manual_seed(1)
    Trainer(precision=precision, max_epochs=2, accumulate_grad_batches=3, gradient_clip_val=1.0, device="cuda",
            **QUIET).fit(ours, loader(data))
    assert next(ours.parameters()).device.type == "cuda"
    assert_same_weights(reference, ours)


@pytest.mark.parametrize("precision", ["fp32", "amp", "bf16"])
def test_with_a_validation_loader_weights_and_val_loss_equal_the_loop(precision):
    """The sanity check is isolated (CUDA RNG restored); each epoch's validation draws as the loop's does."""
    data, val = make_data(), make_data(12, seed=5)
    reference = make_model()
    torch.manual_seed(1)
    expected = cuda_fit(reference, loader(data), val=loader(val, shuffle=False), precision=precision, epochs=2)
    ours = make_model()
    torch.manual_seed(1)
    trainer = Trainer(precision=precision, max_epochs=2, device="cuda", **QUIET)
    trainer.fit(ours, loader(data), loader(val, shuffle=False))
    assert_same_weights(reference, ours)
    assert trainer.callback_metrics["val/loss"] == pytest.approx(expected["val"][-1], rel=1e-6)


@pytest.mark.parametrize("precision", ["fp32", "amp", "bf16"])
def test_a_mid_epoch_resume_equals_the_uninterrupted_run(tmp_path, precision):
    data, val, path = make_data(), make_data(12, seed=5), tmp_path / "mid.ckpt"
    whole = make_model()
    torch.manual_seed(1)
    Trainer(precision=precision, max_epochs=2, device="cuda", callbacks=[SaveAt(4, path)], **QUIET).fit(
        whole, loader(data), loader(val, shuffle=False))
    resumed = make_model(seed=9)  # other initial weights: all of them come from the checkpoint
    torch.manual_seed(123)  # and other random streams
    trainer = Trainer(precision=precision, max_epochs=2, device="cuda", **QUIET)
    trainer.fit(resumed, loader(data), loader(val, shuffle=False), ckpt_path=path)
    assert trainer.global_step == 20
    assert_same_weights(whole, resumed)
    reference = make_model()
    torch.manual_seed(1)
    cuda_fit(reference, loader(data), val=loader(val, shuffle=False), precision=precision, epochs=2)
    assert_same_weights(reference, resumed)


def test_the_current_device_is_the_trainers_and_predictions_come_back_on_the_cpu():
    model = make_model()
    trainer = Trainer(max_steps=2, device="cuda:0", **QUIET)
    trainer.fit(model, loader(make_data()))
    assert torch.cuda.current_device() == 0 and model.device == torch.device("cuda", 0)

    class Predict(type(model)):  # type: ignore[misc]
        def predict_step(self, batch, batch_idx):
            return {"y": self(batch[0].to(self.device))}

    predictor = Predict()
    predictor.load_state_dict(model.state_dict())
    outputs = trainer.predict(predictor, loader(make_data(8), shuffle=False))
    assert len(outputs) == 2 and all(out["y"].device.type == "cpu" for out in outputs)
    predictor.eval()
    with torch.no_grad():
        for out, (x, _) in zip(outputs, loader(make_data(8), shuffle=False)):
            assert torch.equal(out["y"], predictor(x.to(CUDA)).cpu())
