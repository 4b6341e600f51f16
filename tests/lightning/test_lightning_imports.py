"""Lightning's import paths beyond the top level, mapped the same way (`lightning.pytorch.X` ->
`trainer.X`): utilities (rank-zero helpers, `grad_norm`, type aliases, the exception), the
strategy classes and the MLflow logger's spelling."""

from __future__ import annotations

import importlib

import pytest
import torch

from trainer.strategies import DDP, FSDP, DDPStrategy, FSDPStrategy, SingleDeviceStrategy

PATHS = {
    "trainer.utilities": ["rank_zero_only", "rank_zero_info", "rank_zero_warn", "grad_norm", "seed_everything"],
    "trainer.utilities.rank_zero": ["rank_zero_only", "rank_zero_info", "rank_zero_warn", "rank_zero_debug"],
    "trainer.utilities.types": ["STEP_OUTPUT", "OptimizerLRScheduler", "TRAIN_DATALOADERS", "EVAL_DATALOADERS"],
    "trainer.utilities.exceptions": ["MisconfigurationException"],
    "trainer.strategies": ["DDPStrategy", "FSDPStrategy", "SingleDeviceStrategy"],
    "trainer.loggers": ["TensorBoardLogger", "CSVLogger", "WandbLogger", "MLFlowLogger", "Logger"],
}


@pytest.mark.parametrize("module", sorted(PATHS))
def test_lightning_paths_import_with_their_names(module):
    imported = importlib.import_module(module)
    assert [name for name in PATHS[module] if not hasattr(imported, name)] == []


def test_grad_norm_equals_lightnings_and_stays_on_the_device():
    from trainer.utilities import grad_norm

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 1))
    model(torch.randn(5, 4)).sum().backward()
    model[2].bias.grad = None  # a parameter without a gradient is left out
    ours = grad_norm(model, norm_type=2)
    assert list(ours) == ["grad_2.0_norm/0.weight", "grad_2.0_norm/0.bias", "grad_2.0_norm/2.weight", "grad_2.0_norm_total"]
    assert all(isinstance(value, torch.Tensor) for value in ours.values())
    lightning = pytest.importorskip("lightning")
    theirs = lightning.pytorch.utilities.grad_norm(model, norm_type=2)
    assert list(theirs) == list(ours)
    assert all(torch.equal(ours[key], theirs[key]) for key in ours)
    with pytest.raises(ValueError, match="expected a positive number or 'inf'. Received: 0"):
        grad_norm(model, norm_type=0)


def test_misconfiguration_exception_is_a_value_error():
    from trainer.utilities.exceptions import MisconfigurationException

    with pytest.raises(ValueError, match="bad"):
        raise MisconfigurationException("bad")


def test_ddp_strategy_maps_lightnings_arguments():
    strategy = DDPStrategy(find_unused_parameters=True, static_graph=True, bucket_cap_mb=50, timeout=30)
    assert isinstance(strategy, DDP)
    assert strategy.options["find_unused_parameters"] is True and strategy.options["static_graph"] is True
    assert strategy.options["bucket_cap_mb"] == 50 and strategy.timeout.total_seconds() == 30


@pytest.mark.parametrize(("arguments", "message"), [
    ({"accelerator": "gpu"}, r"DDPStrategy\(...\) can't take accelerator= \(the device comes from Trainer"),
    ({"precision_plugin": object()}, r"precision_plugin= \(pass Trainer\(precision=...\)\)"),
    ({"start_method": "spawn"}, r"start_method='spawn'\) is not offered"),
    ({"process_group_backend": "gloo"}, r"the backend follows the device"),
])
def test_ddp_strategy_refuses_what_has_no_meaning_here(arguments, message):
    with pytest.raises(ValueError, match=message):
        DDPStrategy(**arguments)


class Block(torch.nn.Module):
    pass


def test_fsdp_strategy_maps_lightnings_arguments():
    strategy = FSDPStrategy(auto_wrap_policy={Block}, sharding_strategy="SHARD_GRAD_OP", timeout=60)
    assert isinstance(strategy, FSDP)
    assert strategy.options["shard_modules"] == ["Block"] and strategy.options["reshard_after_forward"] is False


@pytest.mark.parametrize(("arguments", "message"), [
    ({"sharding_strategy": "NO_SHARD"}, r"sharding_strategy='NO_SHARD'\) expected one of 'FULL_SHARD', 'SHARD_GRAD_OP'"),
    ({"state_dict_type": "full"}, r"checkpoints here are always sharded folders"),
    ({"auto_wrap_policy": lambda *a: True}, r"a policy function is not offered"),
    ({"activation_checkpointing_policy": {Block}}, r"pass Trainer\(activation_checkpointing=\[...\]\)"),
])
def test_fsdp_strategy_refuses_what_has_no_meaning_here(arguments, message):
    with pytest.raises(ValueError, match=message):
        FSDPStrategy(**arguments)


def test_single_device_strategy():
    assert str(SingleDeviceStrategy(device="cpu").device) == "cpu"
    with pytest.raises(ValueError, match="can't take accelerator="):
        SingleDeviceStrategy(device="cpu", accelerator="cpu")


def test_mlflow_logger_has_lightnings_spelling():
    from trainer.loggers import MLFlowLogger, MLflowLogger

    assert MLFlowLogger is MLflowLogger
