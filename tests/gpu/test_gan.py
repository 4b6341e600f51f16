"""Manual optimization on a GPU: the GAN (two optimizers, one GradScaler, schedulers held on
skipped steps) equals the hand-written CUDA recipe bit for bit, in fp32 and amp, and resumes."""

from __future__ import annotations

import pytest
import torch

from tests.helpers.gan import make_gan, make_points, points_loader
from tests.gpu._references import GPU, QUIET, cuda_gan
from tests.helpers.reference import assert_same_weights
from trainer import Callback, Trainer

pytestmark = GPU


@pytest.mark.parametrize("precision", ["fp32", "amp"])
def test_the_gan_equals_the_hand_written_cuda_recipe(precision):
    reference = make_gan(clip=1.0)
    torch.manual_seed(3)
    expected = cuda_gan(reference, points_loader(make_points()), precision=precision, epochs=2)
    ours = make_gan(clip=1.0)
    torch.manual_seed(3)
    trainer = Trainer(precision=precision, max_epochs=2, device="cuda", **QUIET)
    trainer.fit(ours, points_loader(make_points()))
    assert_same_weights(reference, ours)
    if precision == "amp":
        assert float(trainer.precision.scaler.get_scale()) == expected["scale"]


class SaveAtBatchEnd(Callback):
    """Manual optimization's clean cut: between training_steps (after batch 4 of epoch 0)."""

    def __init__(self, path: object) -> None:
        self.path = path

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if trainer.current_epoch == 0 and batch_idx == 3:
            trainer.save_checkpoint(self.path)


def test_the_gan_resumes_mid_epoch_on_cuda(tmp_path):
    path = tmp_path / "mid.ckpt"
    whole = make_gan()
    torch.manual_seed(3)
    Trainer(precision="amp", max_epochs=2, device="cuda", callbacks=[SaveAtBatchEnd(path)], **QUIET).fit(
        whole, points_loader(make_points()))
    resumed = make_gan(seed=5)
    Trainer(precision="amp", max_epochs=2, device="cuda", **QUIET).fit(resumed, points_loader(make_points()), ckpt_path=path)
    assert_same_weights(whole, resumed)
