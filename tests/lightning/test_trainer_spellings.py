"""Lightning's Trainer spellings: aliases where the meaning is ours, an error that says what to
write where it is not (Lightning's accelerator_connector.py is the reference)."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader

from tests.helpers.reference import TinyNet, make_data
from trainer import Callback, Trainer


@pytest.mark.parametrize(
    ("lightning", "ours"),
    [("bf16-mixed", "bf16"), ("32-true", "fp32"), (32, "fp32")],
)
def test_precision_aliases(lightning, ours):
    assert Trainer(precision=lightning, logger=False).precision.name == ours


@pytest.mark.parametrize("lightning", ["16-mixed", "16", 16])
def test_16_mixed_is_float16_with_a_scaler_on_a_gpu_and_bf16_on_a_cpu_as_lightning_runs_it(lightning):
    # Lightning's accelerator connector: '16-mixed' with accelerator='cpu' warns and becomes 'bf16-mixed'.
    from trainer.lightning.arguments import precision_of
    from trainer.precision import AMP, BF16

    gpu = precision_of("16-mixed", torch.device("cuda"))
    assert isinstance(gpu, AMP) and gpu.autocast_cache is False
    with pytest.warns(UserWarning, match=r"precision='16-mixed'\) on a CPU runs as 'bf16-mixed'.*precision='amp'"):
        cpu = Trainer(precision=lightning, logger=False, device="cpu").precision
    assert isinstance(cpu, BF16) and cpu.autocast_cache is False


@pytest.mark.parametrize(("name", "cache"), [("bf16", True), ("amp", True), ("bf16-mixed", False)])
def test_lightning_spellings_autocast_without_the_weight_cache_as_lightning_does(name, cache):
    # Lightning's MixedPrecision.autocast_context_manager passes cache_enabled=False; ours keep
    # PyTorch's default, what a hand-written loop gets.
    precision = Trainer(precision=name, logger=False, device="cpu").precision
    precision.setup(torch.device("cpu"))
    with precision.autocast():
        assert torch.is_autocast_cache_enabled() is cache


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
        ({"devices": [0, 1]}, "devices=N (N processes"),
        ({"accelerator": "tpu"}, "accelerator='tpu'"),
        ({"plugins": ["deepspeed"]}, "is Lightning's; the Trainer takes no plugins"),  # None or [] (its default) is taken
        ({"num_nodes": 2}, "torchrun --nnodes"),
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
    from trainer.config import prepare_config

    assert TrainerArgs(precision=16).precision == "16-mixed"
    config = {
        "model": {"class_path": "tests.helpers.reference.TinyNet"},
        "data": {"class_path": "tests.helpers.gan.make_points"},
        "trainer": {"precision": "bf16-mixed"},
    }
    assert prepare_config(config).plain["trainer"]["precision"] == "bf16-mixed"


def test_trainer_properties_lightning_users_read(tmp_path, capsys):
    import callbacks

    class Shown(TinyNet):
        def validation_step(self, batch, batch_idx):
            self.log("val/acc", 0.5, prog_bar=True)

    mc = callbacks.ModelCheckpoint(dirpath=tmp_path / "ck")
    stop = callbacks.EarlyStopping("val/acc", mode="max", patience=5)
    trainer = Trainer(max_epochs=2, accumulate_grad_batches=2, log_every_n_steps=1, callbacks=[mc, stop],
                      root_dir=tmp_path, num_sanity_val_steps=0, progress_lines=False)  # the bar, not lines
    trainer.fit(Shown(), DataLoader(make_data(20), batch_size=4), DataLoader(make_data(4)))  # 5 batches
    assert trainer.num_training_batches == 5 and trainer.estimated_stepping_batches == 6  # 3 windows x 2 epochs
    assert trainer.checkpoint_callback is mc and trainer.early_stopping_callback is stop
    assert trainer.is_global_zero and trainer.world_size == 1 and trainer.max_epochs == 2 and trainer.max_steps is None
    assert trainer.logged_metrics["val/acc"] == 0.5 and "train/loss" in trainer.logged_metrics
    assert trainer.progress_bar_metrics["val/acc"] == 0.5 and "loss" in trainer.progress_bar_metrics
    bars = capsys.readouterr().err
    assert "val/acc=0.5" in bars  # validation metrics with prog_bar=True show in the kept epoch bar
    trainer.should_stop = True
    assert trainer.should_stop


def test_lightning_strategy_names(monkeypatch):
    from trainer.distributed import DDP, FSDP

    with pytest.raises(ValueError, match=r"'ddp_spawn' is Lightning's.*strategy='ddp'"):
        Trainer(strategy="ddp_spawn")
    with pytest.raises(ValueError, match=r"'deepspeed_stage_3' is Lightning's.*strategy='fsdp'"):
        Trainer(strategy="deepspeed_stage_3")
    for name, value in dict(RANK="0", WORLD_SIZE="2", LOCAL_RANK="0").items():
        monkeypatch.setenv(name, value)
    from trainer.strategies.parallel import ProcessGroupStrategy

    monkeypatch.setattr(ProcessGroupStrategy, "_group", lambda self: None)  # no peer to meet here
    strategy = Trainer(strategy="ddp_find_unused_parameters_true", device="cpu", logger=False).strategy
    assert isinstance(strategy, DDP) and strategy.options["find_unused_parameters"] is True
    assert type(Trainer(strategy="ddp_find_unused_parameters_false", device="cpu", logger=False).strategy) is DDP
    with pytest.raises(ValueError, match="cpu_offload=True.*CUDA"):  # Lightning's name, our FSDP's check
        Trainer(strategy="fsdp_cpu_offload", device="cpu", logger=False)
    assert FSDP in type(Trainer(strategy="fsdp", device="cpu", logger=False).strategy).__mro__


def test_default_root_dir_none_is_lightnings_default():
    # Lightning's Trainer(default_root_dir=None) means "the working default"; ours is root_dir="runs".
    assert str(Trainer(default_root_dir=None, logger=False).args.root_dir) == str(Trainer(logger=False).args.root_dir)
