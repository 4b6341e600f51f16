"""pytorch/examples' dcgan, ported to a `Module` with manual optimization.

The port trains to the weights (BatchNorm running statistics included) of the script's own loop
(tests/helpers/examples/dcgan.py), the numbers the script prints are equal, and so are the
state dicts it saves after each epoch.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.helpers.examples import QUIET
from tests.helpers.examples.dcgan import make_dcgan, original_dcgan
from tests.helpers.reference import assert_same_weights
from trainer import Trainer



pytestmark = pytest.mark.usefixtures("one_thread")  # tests/examples/conftest.py

# --dry-run (one epoch, a `break` after the first batch) is max_epochs=1, limit_train_batches=1;
# --workers 2 is the script's default.
@pytest.mark.parametrize(("precision", "dry_run", "workers"),
                         [("fp32", False, 0), ("amp", False, 0), ("bf16", False, 0), ("fp32", True, 0), ("fp32", False, 2)])
def test_dcgan(precision: str, dry_run: bool, workers: int, tmp_path: Path) -> None:
    (tmp_path / "port").mkdir()
    (tmp_path / "script").mkdir()
    model, dataloader = make_dcgan(tmp_path / "port", workers)
    limits = dict(max_epochs=1, limit_train_batches=1) if dry_run else dict(max_epochs=2)
    trainer = Trainer(precision=precision, **limits, **QUIET)
    trainer.fit(model, dataloader)
    reference = original_dcgan(precision, dry_run, tmp_path / "script", workers=workers)
    assert_same_weights(model, reference)
    assert model.printed == reference.printed and len(model.printed) == (1 if dry_run else 8)
    assert trainer.global_step == 2 * len(model.printed)  # both optimizers step each batch
    saved = sorted(p.name for p in (tmp_path / "script").iterdir())
    assert saved == sorted(p.name for p in (tmp_path / "port").iterdir()) and len(saved) == (2 if dry_run else 4)
    for name in saved:
        ours, theirs = torch.load(tmp_path / "port" / name), torch.load(tmp_path / "script" / name)
        assert all(torch.equal(ours[k], theirs[k]) for k in theirs) and ours.keys() == theirs.keys()


def test_freezing_the_discriminator_for_the_generators_loss_changes_nothing() -> None:
    """The porting guide's GAN toggles the generator's optimizer (the discriminator stops
    requiring grad) where the script lets errG's backward fill the discriminator's gradients:
    the script zeroes them before they are used, so the weights are the same."""
    model, dataloader = make_dcgan(toggle=True)
    Trainer(max_epochs=2, **QUIET).fit(model, dataloader)
    assert_same_weights(model, original_dcgan("fp32"))


def test_the_comparison_can_fail() -> None:
    """Without the script's sample pass (the fixed noise through the generator in training mode)
    the generator's BatchNorm running statistics end elsewhere."""
    model, dataloader = make_dcgan(sample=False)
    Trainer(max_epochs=2, **QUIET).fit(model, dataloader)
    with pytest.raises(AssertionError, match="netG.main.1.running_mean differs"):
        assert_same_weights(model, original_dcgan("fp32"))
