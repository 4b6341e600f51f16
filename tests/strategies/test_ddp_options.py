"""DDP's options reach DistributedDataParallel (2 CPU processes, Gloo), and are checked at construction."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from trainer import Trainer
from trainer.distributed import DDP, resolve_strategy

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).parents[1] / "helpers" / "scripts" / "options.py"


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    out = tmp_path_factory.mktemp("ddp_options")
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(SCRIPT), str(out)]
    done = subprocess.run(command, cwd=out, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-6000:]
    return [torch.load(out / f"options_rank{r}.pt", weights_only=False) for r in range(2)]


def test_each_option_reaches_distributed_data_parallel(ranks):
    for result in ranks:
        plain, options = result["plain"]["seen"], result["options"]["seen"]
        assert plain["find_unused_parameters"] is False and plain["static_graph"] is False
        assert plain["gradient_as_bucket_view"] is False and plain["bucket_bytes_cap"] == 25 * 1024 * 1024
        assert options["static_graph"] is True and options["gradient_as_bucket_view"] is True
        assert options["bucket_bytes_cap"] == 1024 * 1024
        assert result["unused"]["seen"]["find_unused_parameters"] is True


def test_a_model_with_an_unused_parameter_trains_with_find_unused_parameters(ranks):
    for result in ranks:
        assert result["unused"]["global_step"] == 8
    for key in ranks[0]["unused"]["weights"]:
        assert torch.equal(ranks[0]["unused"]["weights"][key], ranks[1]["unused"]["weights"][key])


def test_an_unused_parameter_without_the_option_names_it_and_the_fix(ranks):
    for result in ranks:
        message = result["unused_without_option"]
        assert "parameters of WithUnused got no gradient in the previous training step (unused.weight, unused.bias)" in message
        assert "Trainer(strategy=DDP(find_unused_parameters=True))" in message


@pytest.mark.parametrize("hook, tolerance", [("fp16", 1e-3)])  # bf16's hook needs NCCL
def test_a_compression_hook_trains_close_to_the_uncompressed_run(ranks, hook, tolerance):
    plain = ranks[0]["plain"]["weights"]
    for result in ranks:
        compressed = result[hook]["weights"]
        difference = max(float((compressed[k] - plain[k]).abs().max()) for k in plain)
        assert 0 < difference < tolerance  # compressed (not identical) yet close
    for key in plain:
        assert torch.equal(ranks[0][hook]["weights"][key], ranks[1][hook]["weights"][key])


def test_bad_options_raise_at_construction():
    with pytest.raises(ValueError, match="expected 'fp16', 'bf16', a callable"):
        DDP(comm_hook="int8")
    with pytest.raises(ValueError, match="bucket_cap_mb"):
        DDP(bucket_cap_mb=0)
    with pytest.raises(ValueError, match="Strategy instance"):
        Trainer(strategy="fsdp2")


def test_a_strategy_instance_is_accepted_and_bound(monkeypatch):
    for name, value in dict(RANK="1", WORLD_SIZE="2", LOCAL_RANK="1").items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(DDP, "_group", lambda self: None)  # no peer to meet in this test
    strategy = DDP(find_unused_parameters=True)
    assert resolve_strategy(strategy, "cpu") is strategy
    assert (strategy.rank, strategy.world_size, strategy.device) == (1, 2, torch.device("cpu"))
    assert strategy.options["find_unused_parameters"] is True
    with pytest.raises(ValueError, match="needs CUDA devices with NCCL"):
        DDP(comm_hook="bf16").bind("cpu")


def test_yaml_strategy_class_spec_reaches_the_trainer():
    """`strategy: {class_path: trainer.distributed.DDP, init_args: {...}}` is built and handed
    to the Trainer (which, outside torchrun, says to launch with torchrun)."""
    from trainer.config import ConfigError, load_experiment, prepare_config

    config = {
        "model": {"class_path": "tests.helpers.cli_pkg.models.TinyClassifier"},
        "data": {"class_path": "tests.helpers.cli_pkg.data.RandomData"},
        "trainer": {"strategy": {"class_path": "trainer.distributed.DDP", "init_args": {"find_unused_parameters": True}}},
    }
    plain = prepare_config(config).plain["trainer"]["strategy"]
    assert plain["class_path"] == "trainer.distributed.DDP" and plain["init_args"]["find_unused_parameters"] is True
    with pytest.raises(ConfigError, match="torchrun"):  # built and given to the Trainer, which needs torchrun
        load_experiment(config)
    bad = dict(config, trainer={"strategy": {"class_path": "trainer.distributed.DDP", "init_args": {"bucket_cap_mb": -1}}})
    with pytest.raises(ConfigError, match="bucket_cap_mb"):
        load_experiment(bad)
