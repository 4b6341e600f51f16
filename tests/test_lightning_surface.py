"""Lightning's Trainer spellings: aliases where the meaning is ours, an error that says what to
write where it is not (issue 11; Lightning's accelerator_connector.py is the reference)."""

from __future__ import annotations

import pytest
from torch.utils.data import DataLoader

from tests.reference import TinyNet, make_data
from trainer import Callback, Trainer


@pytest.mark.parametrize(
    ("lightning", "ours"),
    [("16-mixed", "amp"), (16, "amp"), ("bf16-mixed", "bf16"), ("32-true", "fp32"), (32, "fp32")],
)
def test_precision_aliases(lightning, ours):
    assert Trainer(precision=lightning, logger=False).precision.name == ours


@pytest.mark.parametrize("value", ["bf16-true", "16-true", "64-true"])
def test_precisions_we_do_not_have_say_what_to_write(value):
    with pytest.raises(ValueError, match="Expected one of 'fp32', 'amp', 'bf16'"):
        Trainer(precision=value)


def test_accelerator_devices_default_root_dir_and_minus_one(tmp_path):
    trainer = Trainer(accelerator="cpu", devices=1, default_root_dir=tmp_path, max_epochs=-1, max_steps=2,
                      enable_progress_bar=False)
    assert trainer.args.device == "cpu" and trainer.args.root_dir == tmp_path and trainer.args.max_epochs is None
    trainer.fit(TinyNet(), DataLoader(make_data(8), batch_size=4))
    assert trainer.global_step == 2 and str(trainer.log_dir).startswith(str(tmp_path))


def test_one_callback_alone_is_taken():
    class One(Callback):
        pass

    one = One()
    assert Trainer(callbacks=one, logger=False).callbacks == [one]


@pytest.mark.parametrize(
    ("kwargs", "text"),
    [
        ({"devices": 4}, "torchrun --nproc_per_node=N"),
        ({"accelerator": "tpu"}, "accelerator='tpu'"),
        ({"enable_model_summary": False}, "is Lightning's"),
        ({"deterministic": True}, "torch.use_deterministic_algorithms"),
        ({"resume_from_checkpoint": "x.ckpt"}, "ckpt_path"),
        ({"max_epoch": 3}, "Did you mean 'max_epochs'?"),
    ],
)
def test_what_we_do_not_take_says_what_to_write(kwargs, text):
    with pytest.raises(ValueError) as caught:
        Trainer(**kwargs)
    assert text in str(caught.value)


def test_yaml_takes_the_precision_alias_too():
    from trainer._args import TrainerArgs

    assert TrainerArgs(precision="16-mixed").precision == "amp"
