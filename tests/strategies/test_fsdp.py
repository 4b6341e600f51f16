"""FSDP (FSDP2's fully_shard) on 2 CPU processes with Gloo, against one process.

The 2-process runs are in tests/helpers/scripts/fsdp_worker.py; each rank saves its results
and the numbers are checked here against a one-process Trainer with the global batch.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from tests.helpers.reference import make_data
from trainer import Trainer
from trainer.checkpoint import CheckpointError, export_weights
from trainer.distributed import FSDP

ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).parents[1] / "helpers" / "scripts" / "fsdp_worker.py"

pytestmark = pytest.mark.skipif(not torch.distributed.is_available(), reason="needs torch.distributed")


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    return env


def _command(phase: str, out: Path) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(WORKER), phase, str(out)]


def torchrun(phase: str, out: Path) -> list[dict[str, Any]]:
    done = subprocess.run(_command(phase, out), cwd=out, env=_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"torchrun {phase} failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    return [torch.load(out / f"{phase}_rank{r}.pt", weights_only=False) for r in range(2)]  # our own files


def max_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in a)


@pytest.fixture(scope="module")
def parity(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return torchrun("parity", tmp_path_factory.mktemp("fsdp_parity"))


def one_process(precision: str, accumulate: int, clip: float | None, optimizer: str) -> tuple[dict[str, torch.Tensor], list[float]]:
    """The same job in one process: the global batch of 8 (both ranks' 4 samples)."""
    from tests.helpers.scripts import fsdp_worker as worker
    norms = worker.Norms()
    net = worker.model(optimizer)
    t = worker.trainer("single", precision, accumulate, clip, max_epochs=2, callbacks=[norms])
    t.fit(net, DataLoader(make_data(48), batch_size=8, shuffle=False))
    return worker.full(net), norms.norms


@pytest.mark.parametrize(
    "case, tolerance",
    [
        (("fp32", 3, 0.5, "sgd"), 1e-6),  # accumulation 3 and clipping by the global norm
        (("bf16", 1, None, "adam"), 1e-2),  # bf16 compute on half the batch per rank: rounding differs
        (("amp", 2, 0.5, "adam"), 2e-3),
    ],
)
def test_fsdp_trains_like_one_process_with_the_global_batch(parity, case, tolerance):
    precision = case[0]
    reference, reference_norms = one_process(*case)
    for rank in range(2):
        got = parity[rank][f"fsdp/{precision}"]
        assert max_difference(got["weights"], reference) <= tolerance
        assert len(got["norms"]) == len(reference_norms) == got["global_step"]
        relative = max(abs(a - b) / b for a, b in zip(got["norms"], reference_norms))
        assert relative <= (1e-6 if precision == "fp32" else 5e-2)  # the global norm, not a shard's
    # every rank holds the same model, and FSDP equals DDP on the same job
    assert max_difference(parity[0][f"fsdp/{precision}"]["weights"], parity[1][f"fsdp/{precision}"]["weights"]) == 0.0
    ddp = parity[0][f"ddp/{precision}"]["weights"]
    assert max_difference(parity[0][f"fsdp/{precision}"]["weights"], ddp) <= (1e-6 if precision == "fp32" else tolerance)
    if precision == "amp":  # the GradScaler's scale agrees with DDP's (same skips and growth)
        assert parity[0]["fsdp/amp"]["scale"] == parity[0]["ddp/amp"]["scale"] == parity[1]["fsdp/amp"]["scale"]


def test_reshard_after_forward_and_mixed_precision_options(parity):
    # keeping parameters gathered until backward changes memory, not numbers
    assert max_difference(parity[0]["keep_gathered/fp32"]["weights"], parity[0]["fsdp/fp32"]["weights"]) == 0.0
    # float32 parameters under bf16: DDP's numbers exactly (both gather nothing in bf16)
    fp32_params = parity[0]["fp32_params/bf16"]["weights"]
    assert max_difference(fp32_params, parity[0]["ddp/bf16"]["weights"]) <= 1e-6
    # bf16 gathering saves memory and traffic, not precision: autocast casts float32 weights to
    # bfloat16 for each op anyway, and the batch is not cast at the root (float targets keep theirs)
    assert max_difference(fp32_params, parity[0]["fsdp/bf16"]["weights"]) <= 1e-6


def test_amp_skips_a_step_on_every_rank_when_one_shard_overflows(parity):
    """The overflowing element's gradient lands in rank 1's shard only; both ranks must still
    skip the same steps and back off alike (torch's DTensor unscale combines the found-inf
    flags, and the Trainer's scaler combines them again, so neither rule alone is relied on)."""
    fsdp = [parity[rank]["overflow/fsdp"] for rank in range(2)]
    assert fsdp[0]["skipped"] >= 2 and fsdp[0]["scale"] <= 256.0  # it did overflow and back off
    assert (fsdp[0]["skipped"], fsdp[0]["scale"], fsdp[0]["global_step"]) == (fsdp[1]["skipped"], fsdp[1]["scale"], fsdp[1]["global_step"])
    assert max_difference(fsdp[0]["weights"], fsdp[1]["weights"]) == 0.0
    # DDP pre-divides gradients before summing them and FSDP divides after, so at the float32
    # limit FSDP overflows at one more scale (3 skips against DDP's 2): same rule, one step apart.
    assert parity[0]["overflow/ddp"]["skipped"] == 2 and fsdp[0]["skipped"] == 3


def test_a_tied_language_model_trains_like_one_process(parity):
    from tests.helpers.scripts.fsdp_worker import tied

    reference = tied(8, "single")
    for rank in range(2):
        assert max_difference(parity[rank]["tied"], reference) <= 1e-6
    assert torch.equal(parity[0]["tied"]["emb.weight"], parity[0]["tied"]["head.weight"])  # still one tensor


def test_size_rule_validation_and_a_sampler_made_before_fit(parity):
    # min_shard_params=100: the 6->16 layer (112 parameters) is a unit, the 16->1 (17) is not
    assert parity[0]["size_rule"]["units"] == ["FSDPLinear:6"]
    # validate() after fit runs through the sharded model; a DistributedSampler(dataset)
    # made before fit found the process group the Trainer made; metrics agree over ranks
    assert parity[0]["validate"] == parity[1]["validate"]
    net_weights = parity[0]["size_rule"]["weights"]
    x, y = make_data(10, seed=1).tensors
    hidden = torch.relu(x @ net_weights["net.0.weight"].T + net_weights["net.0.bias"])
    expected = torch.nn.functional.mse_loss(hidden @ net_weights["net.3.weight"].T + net_weights["net.3.bias"], y)
    assert parity[0]["validate"]["val/loss"] == pytest.approx(float(expected), rel=1e-5)
    # predict through the sharded model: each rank gets its share (5 of 10 samples)
    for rank in range(2):
        outputs = parity[rank]["predict"]
        assert sum(len(o) for o in outputs) == 5
    for rank in range(2):
        assert "different number of batches on each rank (rank 0: 3, rank 1: 7)" in parity[rank]["uneven"]


@pytest.fixture(scope="module")
def resumed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    out = tmp_path_factory.mktemp("fsdp_resume")
    return out, torchrun("resume", out)


def test_sigterm_mid_epoch_then_resume_is_exact_on_every_rank(resumed):
    _, results = resumed
    for rank in range(2):
        r = results[rank]
        assert r["stopped_at"] == 4 and r["resumed_step"] == 9  # stopped inside epoch 1 of 3
        assert r["resumed_in"]  # ckpt_path="last": the run continues in its own folder
        assert r["last_is_folder"] and r["last_files"] == [".metadata", "__0_0.distcp", "__1_0.distcp", "trainer_state.ckpt"]
        for key in r["whole"]:
            assert torch.equal(r["whole"][key], r["resumed"][key]), (rank, key)
    # the uninterrupted run saved folders every 2 steps (Lightning's rule: every_n_train_steps turns the
    # epoch-end saves off) with save_top_k=1: the newest one is left
    assert results[0]["kept"] == ["epoch=2-step=8.ckpt"]


def test_export_gives_one_plain_file_that_loads_anywhere(resumed):
    out, results = resumed
    exported = torch.load(out / "exported.pt", weights_only=True)
    assert set(exported) == set(results[0]["cut"])
    for key, value in results[0]["cut"].items():
        assert torch.equal(exported[key], value), key
    # It loads into a plain one-process model, which then predicts as the sharded one did.
    from tests.helpers.scripts.fsdp_worker import resume_model

    net = resume_model()
    net.load_state_dict(exported)
    x = make_data(5, seed=3).tensors[0]
    w = results[0]["cut"]
    expected = torch.relu(x @ w["net.0.weight"].T + w["net.0.bias"]) @ w["net.3.weight"].T + w["net.3.bias"]
    net.eval()
    assert torch.allclose(net(x), expected, atol=1e-6)


def test_a_sharded_checkpoint_resumes_in_one_process(resumed):
    """DCP reshards: the 2-process folder continues in a single process (not bit-exact: the
    data is split differently, which the Trainer says)."""
    out, results = resumed
    from tests.helpers.scripts.fsdp_worker import resume_model

    last = out / "at_stop.ckpt"  # the folder at the stop (the resumed run wrote on in the same folder)
    net = resume_model()
    t = Trainer(max_epochs=3, logger=False, enable_checkpointing=False, enable_progress_bar=False, precision="amp",
                accumulate_grad_batches=2, gradient_clip_val=0.5, seed=7)
    with pytest.warns(UserWarning, match="written by 2 process"):
        t.fit(net, DataLoader(make_data(40), batch_size=8, shuffle=True), ckpt_path=last)
    assert t.global_step == 9  # continued from step 4 of the 2-process run


def test_a_one_process_checkpoint_file_continues_under_fsdp(tmp_path):
    """Whole weights and Adam state of a single file are sharded as they load: FSDP then
    continues as one process would (within 1e-6), and evaluates the file's weights."""
    from tests.helpers.scripts.fsdp_worker import full, model, trainer
    from tests.helpers.reference import weights

    net = model("adam")
    first = trainer("single", "fp32", 1, 0.5, max_steps=3, max_epochs=1)
    first.fit(net, DataLoader(make_data(48), batch_size=8, shuffle=False))
    first.save_checkpoint(tmp_path / "single.ckpt")
    at_save = weights(net)
    later = trainer("single", "fp32", 1, 0.5, max_steps=6, max_epochs=1)
    later.fit(net, DataLoader(make_data(48), batch_size=8, shuffle=False), ckpt_path=tmp_path / "single.ckpt")
    ranks = torchrun("from_file", tmp_path)
    for result in ranks:
        assert result["global_step"] == 6
        assert max_difference(result["weights"], full(net)) <= 1e-6
    # validate(ckpt_path=file) under FSDP scores the file's weights (evaluated here by hand)
    x, y = make_data(10, seed=1).tensors
    hidden = torch.relu(x @ at_save["net.0.weight"].T + at_save["net.0.bias"])
    expected = torch.nn.functional.mse_loss(hidden @ at_save["net.3.weight"].T + at_save["net.3.bias"], y)
    assert ranks[0]["validate"]["val/loss"] == pytest.approx(float(expected), rel=1e-5)


def _folder_checkpoint(tmp_path: Path) -> Path:
    """A real sharded folder written by one process (FSDP's format, without FSDP)."""
    import torch.distributed.checkpoint as dcp

    from tests.helpers.reference import make_model
    from trainer.checkpoint import FORMAT, FORMAT_VERSION, save_atomic

    folder = tmp_path / "x.ckpt"
    model = make_model()
    dcp.save({"module": model.state_dict(), "optimizers": {}}, checkpoint_id=folder, no_dist=True)
    save_atomic({"format": FORMAT, "format_version": FORMAT_VERSION, "module": {}, "sharded": {"world_size": 1},
                 "module_class": "TinyNet"}, folder / "trainer_state.ckpt")
    return folder


def test_trainer_export_of_a_folder_says_only_what_it_wrote(tmp_path, capsys):
    """Reading shards in one process is what export means: torch's warning that torch.distributed
    is "disabled, unavailable or uninitialized" is not shown (every other warning still is)."""
    import warnings

    from trainer.config.cli import main

    folder = _folder_checkpoint(tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main(["export", str(folder), str(tmp_path / "w.pt")]) == 0
    assert [str(w.message) for w in caught if "torch.distributed" in str(w.message)] == []
    assert "Traceback" not in capsys.readouterr().err and (tmp_path / "w.pt").is_file()


def test_a_folder_is_checked_before_anything_is_touched(tmp_path):
    from tests.helpers.reference import make_model, weights

    folder = _folder_checkpoint(tmp_path)
    other = make_model(seed=5)
    before = weights(other)
    export_weights(folder, tmp_path / "w.pt")  # a good folder exports
    assert set(torch.load(tmp_path / "w.pt", weights_only=True)) == set(before)

    class Wider(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(6, 32), torch.nn.ReLU(), torch.nn.Dropout(0.0), torch.nn.Linear(32, 1))

    from trainer.checkpoint.sharded import read_sharded, restore_sharded

    with pytest.raises(CheckpointError, match=r"does not fit Wider.*mis-shaped: net\.0\.bias: checkpoint \(16,\) vs model \(32,\)"):
        restore_sharded(Wider(), None, read_sharded(folder))
    (folder / ".metadata").unlink()
    with pytest.raises(CheckpointError, match=r"without \.metadata.*not a complete sharded checkpoint"):
        read_sharded(folder)
    with pytest.raises(CheckpointError, match="does not exist"):
        read_sharded(tmp_path / "missing.ckpt")
    assert weights(other).keys() == before.keys() and all(torch.equal(weights(other)[k], before[k]) for k in before)


def test_a_folder_whose_index_would_run_code_is_refused(tmp_path):
    import pickle

    folder = _folder_checkpoint(tmp_path)

    class Evil:
        def __reduce__(self):  # type: ignore[no-untyped-def]
            return (os.system, ("echo pwned > " + str(tmp_path / "pwned"),))

    (folder / ".metadata").write_bytes(pickle.dumps(Evil()))
    from trainer.checkpoint.sharded import read_sharded

    with pytest.raises(CheckpointError, match="refused without running any of it"):
        read_sharded(folder)
    assert not (tmp_path / "pwned").exists()


def _reap(pid: int) -> None:
    """Wait until a killed rank (not our child: torchrun's) is gone."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    raise AssertionError(f"rank process {pid} survived SIGKILL")


def test_kill_during_sharded_saves_never_leaves_a_checkpoint_that_loads_wrongly(tmp_path):
    """SIGKILL the whole job at several moments while it saves one folder again and again:
    the folder (or the copy set aside mid-swap) always loads, whole, from a single save."""
    from trainer.checkpoint.sharded import export_weights as export

    for delay in (0.0, 0.05, 0.13, 0.29):
        out = tmp_path / f"kill{delay}"
        out.mkdir()
        job = subprocess.Popen(_command("save_loop", out), cwd=out, env=_env(), stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)
        ranks: list[int] = []
        try:
            deadline = time.monotonic() + 120
            while not (out / "saved.txt").exists() and time.monotonic() < deadline:
                time.sleep(0.02)
            assert (out / "saved.txt").exists(), "the job never saved"
            ranks = [int((out / f"pid_rank{r}").read_text()) for r in range(2)]
            time.sleep(delay)
        finally:
            for pid in ranks:  # both ranks, mid-whatever (rank 0 first: it alone renames folders)
                os.kill(pid, signal.SIGKILL)
            os.killpg(job.pid, signal.SIGKILL)  # and torchrun
            job.wait(timeout=30)
            for pid in ranks:
                _reap(pid)
        weights = export(out / "loop.ckpt", out / "w.pt")
        values = {float(v) for t in torch.load(weights, weights_only=True).values() for v in t.flatten()}
        assert len(values) == 1, f"a mix of saves: {sorted(values)[:5]}"
        assert int(values.pop()) >= int((out / "saved.txt").read_text())  # never older than the last completed save


def test_fsdp_options_are_checked_at_construction():
    with pytest.raises(ValueError, match=r"expected a list of class names.*shard_modules=\['Block'\]"):
        FSDP(shard_modules="Block")
    with pytest.raises(ValueError, match="min_shard_params=...\\) expected a positive int"):
        FSDP(min_shard_params=0)
    with pytest.raises(ValueError, match="expected to run under torchrun"):
        Trainer(strategy="fsdp", device="cpu")
    assert "shard_modules=['Block']" in repr(FSDP(shard_modules=["Block"]))


def test_a_checkpoint_set_aside_mid_swap_still_loads_and_is_put_back(tmp_path):
    """A kill between the swap's two renames leaves the previous folder aside as
    `.NAME.PID.old`: loading finds it, and the next save puts it back first."""
    from trainer.checkpoint.sharded import _tidy, is_sharded

    folder = _folder_checkpoint(tmp_path)
    expected = {k: v.clone() for k, v in torch.load(export_weights(folder, tmp_path / "a.pt"), weights_only=True).items()}
    aside = tmp_path / ".x.ckpt.4194305.old"  # above Linux's largest pid: a process that is gone
    os.replace(folder, aside)
    (tmp_path / ".x.ckpt.4194305.tmp").mkdir()  # and the new save's unfinished folder
    assert is_sharded(folder)
    got = torch.load(export_weights(folder, tmp_path / "b.pt"), weights_only=True)
    assert all(torch.equal(got[k], expected[k]) for k in expected)
    _tidy(folder)
    assert folder.is_dir() and not aside.exists() and not (tmp_path / ".x.ckpt.4194305.tmp").exists()


def test_cli_export_from_a_folder_and_from_a_file(tmp_path, capsys):
    from tests.helpers.reference import make_model, weights
    from trainer.config.cli import main

    folder = _folder_checkpoint(tmp_path)
    assert main(["export", str(folder), str(tmp_path / "a.pt")]) == 0
    expected = weights(make_model())
    got = torch.load(tmp_path / "a.pt", weights_only=True)
    assert got.keys() == expected.keys() and all(torch.equal(got[k], expected[k]) for k in expected)
    model = make_model(seed=4)
    trainer = Trainer(max_steps=1, logger=False, enable_checkpointing=False, enable_progress_bar=False)
    trainer.fit(model, DataLoader(make_data(8), batch_size=4))
    trainer.save_checkpoint(tmp_path / "one.ckpt")
    assert main(["export", str(tmp_path / "one.ckpt"), str(tmp_path / "b.pt")]) == 0
    got = torch.load(tmp_path / "b.pt", weights_only=True)
    assert all(torch.equal(got[k], v) for k, v in weights(model).items())
    assert main(["export", str(tmp_path / "nothing.ckpt"), str(tmp_path / "c.pt")]) == 2
    assert "'" + str(tmp_path / "nothing.ckpt") + "' does not exist" in capsys.readouterr().err
    assert not (tmp_path / "c.pt").exists()


def test_one_process_evaluates_a_sharded_folder(tmp_path):
    """validate(ckpt_path=folder) without FSDP: DCP loads the shards into the plain model."""
    from tests.helpers.reference import make_model, weights

    folder = _folder_checkpoint(tmp_path)  # holds make_model()'s weights
    model = make_model(seed=9)
    t = Trainer(logger=False, enable_progress_bar=False, enable_checkpointing=False)
    t.validate(model, DataLoader(make_data(8), batch_size=4), ckpt_path=folder)
    expected = weights(make_model())
    assert all(torch.equal(weights(model)[k], expected[k]) for k in expected)


@pytest.mark.slow
def test_memory_benchmark_runs_tiny_and_fsdp_holds_half():
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "fsdp_memory.py"), "--layers", "2", "--width", "64", "--steps", "2"],
        cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    import json

    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    ddp, fsdp = rows[0]["ddp"]["bytes"], rows[0]["fsdp"]["bytes"]
    assert all(fsdp[k] * 2 == ddp[k] for k in ("parameters", "gradients")), (ddp, fsdp)
    assert rows[1]["fsdp_over_ddp_memory"] == pytest.approx(0.5, abs=1e-3)


def test_yaml_fsdp_class_spec_is_built_and_checked():
    from trainer.config import ConfigError, load_experiment

    config = {
        "model": {"class_path": "tests.helpers.cli_pkg.models.TinyClassifier"},
        "data": {"class_path": "tests.helpers.cli_pkg.data.RandomData"},
        "trainer": {"strategy": {"class_path": "trainer.distributed.FSDP", "init_args": {"shard_modules": ["Linear"]}}},
    }
    with pytest.raises(ConfigError, match="torchrun"):  # built, then bound: it needs torchrun's processes
        load_experiment(config)
    bad = dict(config, trainer={"strategy": {"class_path": "trainer.distributed.FSDP", "init_args": {"min_shard_params": 0}}})
    with pytest.raises(ConfigError, match="min_shard_params"):
        load_experiment(bad)


def test_manual_optimization_under_fsdp_says_to_use_ddp(monkeypatch):
    from tests.helpers.gan import GAN

    for name, value in dict(RANK="0", WORLD_SIZE="2", LOCAL_RANK="0").items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(FSDP, "_group", lambda self: None)  # no peer in this test: fails before any collective
    trainer = Trainer(strategy=FSDP(), device="cpu", logger=False, enable_progress_bar=False, enable_checkpointing=False)
    with pytest.raises(ValueError, match="runs automatic optimization only.*strategy='ddp' for manual optimization"):
        trainer.fit(GAN(), DataLoader(make_data(8), batch_size=4))


def test_tied_weights_are_named_or_left_to_the_root():
    """A parameter used from outside its FSDP unit (a language model's tied embedding and
    output layer) would meet a shard: named at setup; the size rule leaves both to the root."""

    from tests.helpers.scripts.fsdp_worker import TiedLM

    model = TiedLM()
    with pytest.raises(ValueError, match=r"'head.weight' of TiedLM is the same tensor as 'emb.weight' inside the FSDP unit 'emb'"):
        FSDP(shard_modules=["Embedding"])._units(model)
    assert FSDP(min_shard_params=50)._units(model) == [model.body]  # emb (400) and head are tied: root
