"""The cluster for real: a SLURM scheduler, a rank that dies and comes back, two machines.

- A one-node SLURM cluster (tests/helpers/slurm_cluster.py: Debian's slurm-wlm and munge,
  daemons as root, started once for this module and stopped by process id at its end, or by
  its watcher if the test process dies). `srun`, `sbatch`, `scancel -s USR1` and the
  Trainer's own `scontrol requeue` are the real commands; tests/strategies/test_slurm.py's
  fake `scontrol` stays the fast layer. The time-limit path (`--time` with `--signal=USR1@N`)
  is not run here: SLURM's smallest limit is one minute and it checks limits and signal times
  about every 30 s, so one such job costs more than this module's whole budget; SLURM
  delivers the same signal to the same tasks either way.
- `torchrun --max-restarts`: a rank that exits hard, and a rank 0 that dies halfway through a
  save; the restarted workers continue from the newest complete checkpoint.
- Two network namespaces joined by a veth pair, one torchrun agent in each.

Every job runs tests/helpers/scripts/cluster_worker.py and is compared with `torch.equal` to
one uninterrupted `torchrun --nproc_per_node=2` run of it (the `reference` fixture).
"""

from __future__ import annotations

import contextlib
import csv
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DistributedSampler

from tests.helpers import netns
from tests.helpers.launch import ROOT, run_torchrun, torchrun_env
from tests.helpers.reference import make_data, make_model, weights
from tests.helpers.slurm_cluster import Cluster, unavailable
from trainer.checkpoint import load_checkpoint

pytestmark = [pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SLURM, network namespaces: Linux only"),
              pytest.mark.slow]

WORKER = ROOT / "tests" / "helpers" / "scripts" / "cluster_worker.py"
#: Every job here ends well within this (seconds); one that hangs is cancelled and fails its test.
BOUND_S = 240
STEPS = 10  # 2 epochs of 5 optimizer steps (40 samples, 4 per rank and step, 2 ranks)


def load(path: Path) -> dict[str, Any]:
    return torch.load(path, weights_only=False)  # our own files


def assert_equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


# ------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The uninterrupted job under `torchrun --nproc_per_node=2`, with a checkpoint every 5 steps."""
    out = tmp_path_factory.mktemp("reference")
    done = run_torchrun(WORKER, str(out), str(out / "runs"), "every=5", cwd=out, timeout=BOUND_S)
    assert done.returncode == 0, done.stderr[-4000:]
    results = [load(out / f"result.0.{rank}.pt") for rank in range(2)]
    steps = {load_checkpoint(p)["loop"]["global_step"]: p for p in (out / "runs").rglob("step-*.ckpt")}
    return {"results": results, "checkpoints": steps}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Any:
    reason = unavailable()
    if reason:
        pytest.skip(f"no SLURM cluster: {reason}")
    cluster = Cluster(tmp_path_factory.mktemp("slurm"))
    try:
        cluster.start(timeout=60, lifetime=1800, owner=os.getpid())
        yield cluster
    finally:
        left = cluster.stop()
        assert not left, f"SLURM processes still running after SIGKILL: {left}"


def job_env(cluster: Cluster) -> dict[str, str]:
    env = cluster.env
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    return env


def srun(cluster: Cluster, out: Path, *args: str, tasks: int = 2) -> subprocess.CompletedProcess[str]:
    command = ["srun", f"-n{tasks}", "--kill-on-bad-exit=1", "--time=4", sys.executable, str(WORKER), str(out), *args]
    try:
        return subprocess.run(command, cwd=out, env=job_env(cluster), capture_output=True, text=True, timeout=BOUND_S)
    except subprocess.TimeoutExpired as error:
        subprocess.run(["scancel", "--full", "--user=root"], env=cluster.env, capture_output=True, timeout=30)
        pytest.fail(f"srun still ran after {BOUND_S} s: {error.stderr!r}")


def job_state(cluster: Cluster, job: str) -> dict[str, str]:
    done = subprocess.run(["scontrol", "show", "job", "-o", job], env=cluster.env, capture_output=True, text=True, timeout=30)
    return dict(re.findall(r"(\w+)=(\S*)", done.stdout))


def wait_for(cluster: Cluster, job: str, ready: Any, what: str, log: Path, bound: float = BOUND_S) -> None:
    """Poll until `ready()`; past `bound` seconds cancel the job and fail with its log."""
    deadline, polls = time.monotonic() + bound, 0
    while not ready():
        polls += 1
        state = job_state(cluster, job).get("JobState", "") if polls % 10 == 0 else ""  # once a second
        if state in ("FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE") or \
                time.monotonic() > deadline:
            subprocess.run(["scancel", "--full", job], env=cluster.env, capture_output=True, timeout=30)
            text = log.read_text() if log.exists() else "(no log)"
            pytest.fail(f"SLURM job {job} ({state or 'still running'}) while waiting for {what}:\n{text[-6000:]}")
        time.sleep(0.1)


# --------------------------------------------------------------------------- srun
def global_batch_reference() -> dict[str, torch.Tensor]:
    """One process by hand: each step's batch is both ranks' 4 samples (DistributedSampler's
    shuffle, seed 7, as the Trainer sets it), the loss their mean, SGD with momentum."""
    data, model = make_data(40), make_model(dropout=0.0)
    optimizer = model.configure_optimizers()
    for epoch in range(2):
        orders = []
        for rank in range(2):
            sampler = DistributedSampler(data, num_replicas=2, rank=rank, shuffle=True, seed=7)
            sampler.set_epoch(epoch)
            orders.append(list(sampler))
        for step in range(5):
            batch = [index for order in orders for index in order[step * 4:(step + 1) * 4]]
            x, y = data[batch]
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    return weights(model)


def test_srun_trains_like_torchrun_and_like_one_process_with_the_global_batch(cluster, reference, tmp_path):
    done = srun(cluster, tmp_path, str(tmp_path / "runs"))
    assert done.returncode == 0, done.stderr[-4000:]
    by_hand = global_batch_reference()
    for rank in range(2):
        got = load(tmp_path / f"result.0.{rank}.pt")
        assert (got["rank"], got["world_size"], got["global_step"]) == (rank, 2, STEPS)
        assert_equal(got["weights"], reference["results"][rank]["weights"])  # srun -n2 == torchrun --nproc_per_node=2
        assert max(float((got["weights"][k] - by_hand[k]).abs().max()) for k in by_hand) < 1e-6  # summation order only
    [folder] = (tmp_path / "runs" / "default").iterdir()
    assert re.fullmatch(r"slurm-\d+", folder.name)  # the job's own run folder


# ------------------------------------------------------------------------- sbatch
BATCH = """#!/bin/bash
#SBATCH --ntasks=2
#SBATCH --time=10
#SBATCH --signal=USR1@60
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output={out}/job-%j.out
srun --kill-on-bad-exit=1 {python} {worker} {out} {root} stops={stops}
"""


def csv_steps(run: Path, column: str) -> list[int]:
    with open(run / "metrics.csv", newline="") as handle:
        return [int(row["step"]) for row in csv.DictReader(handle) if row.get(column)]


def test_a_job_preempted_at_start_up_and_twice_in_training_finishes_as_if_uninterrupted(cluster, reference, tmp_path):
    """One `sbatch --requeue` job and `scancel -s USR1` three times: while the script starts
    (after `import trainer`, before the Trainer exists), inside optimizer step 3 and inside
    step 8 (the second epoch). Each time the job stops with a checkpoint, requeues itself
    through `scontrol`, and the next launch continues; the fourth finishes. (A signal during
    the sanity check is inside fit, handled as one in a step: tests/strategies/test_slurm.py.)"""
    stops = ["start", "step2", "step7"]
    script = tmp_path / "job.sh"
    script.write_text(BATCH.format(out=tmp_path, python=sys.executable, worker=WORKER, root=tmp_path / "runs",
                                   stops=",".join(stops)))
    submitted = subprocess.run(["sbatch", "--parsable", str(script)], cwd=tmp_path, env=job_env(cluster),
                               capture_output=True, text=True, timeout=30)
    assert submitted.returncode == 0, submitted.stderr
    job = submitted.stdout.strip().split(";")[0]
    log = tmp_path / f"job-{job}.out"
    for launch, where in enumerate(stops):
        holds = [tmp_path / f"hold.{launch}.{rank}" for rank in range(2)]
        wait_for(cluster, job, lambda: all(h.exists() for h in holds), f"launch {launch} to hold at {where}", log)
        assert job_state(cluster, job)["Restarts"] == str(launch)
        subprocess.run(["scancel", "-s", "USR1", job], env=cluster.env, check=True, timeout=30)
    wait_for(cluster, job, lambda: (tmp_path / "result.3.1.pt").exists() and (tmp_path / "result.3.0.pt").exists(),
             "the last launch to finish", log)
    wait_for(cluster, job, lambda: job_state(cluster, job).get("JobState") == "COMPLETED", "the job to complete", log)
    text = log.read_text()
    assert job_state(cluster, job)["Restarts"] == "3"
    assert text.count(f"Requeued SLURM job {job}") == 3, text[-6000:]  # once per stopped launch, by rank 0
    assert text.count("SIGUSR1 arrived before fit") == 2  # launch 0, on both ranks
    stopped_at = [int(n) for n in re.findall(r"Stopped on SIGUSR1 after optimizer step (\d+)", text)]
    assert len(stopped_at) == 6 and stopped_at == sorted(stopped_at), stopped_at  # both ranks, three launches
    assert 3 <= stopped_at[2] < 5 and 8 <= stopped_at[4] < 10  # mid-epoch: the resumes continue inside an epoch
    for rank in range(2):
        final = load(tmp_path / f"result.3.{rank}.pt")
        assert final["global_step"] == STEPS
        assert_equal(final["weights"], reference["results"][rank]["weights"])
    [run] = (tmp_path / "runs" / "default").iterdir()  # one run folder for the four launches
    assert run.name == f"slurm-{job}" and Path(final["log_dir"]) == run
    assert csv_steps(run, "train/mse") == list(range(1, STEPS + 1))  # no gap, no step twice
    assert len(csv_steps(run, "val/loss")) == 2  # one validation per epoch


# -------------------------------------------------------- the sbatch script of the docs
def doc_blocks() -> tuple[str, str]:
    """docs/distributed.md's cluster section: its batch script and its train.py."""
    page = (ROOT / "docs" / "distributed.md").read_text(encoding="utf-8")
    section = page.split("## Cluster (SLURM)", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```(\w*)\n(.*?)```", section, flags=re.S)
    [script] = [body for language, body in blocks if language == "bash" and body.startswith("#!/bin/bash")]
    [train] = [body for language, body in blocks if language == "python" and body.startswith("# train.py")]
    return script, train


#: What this one 2-CPU node can give, on sbatch's command line (it wins over the #SBATCH lines).
SIZED_TO_THIS_NODE = ["--nodes=1", "--ntasks-per-node=2", "--gpus-per-node=0", "--cpus-per-task=1"]


def test_the_sbatch_script_of_the_docs_runs_as_written(cluster, tmp_path):
    """The page's script and train.py, unchanged but for the resources (on the command line)
    and the length (a tenth of one epoch instead of 100 epochs)."""
    script, train = doc_blocks()
    assert "srun python train.py" in script and "max_epochs=100" in train
    (tmp_path / "train.sbatch").write_text(script)
    (tmp_path / "train.py").write_text(train.replace("max_epochs=100", "max_epochs=1, limit_train_batches=0.1"))
    env = job_env(cluster)
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"  # `python` in the script is this interpreter
    submitted = subprocess.run(["sbatch", "--parsable", *SIZED_TO_THIS_NODE, "train.sbatch"], cwd=tmp_path, env=env,
                               capture_output=True, text=True, timeout=30)
    assert submitted.returncode == 0, submitted.stderr
    job = submitted.stdout.strip().split(";")[0]
    log = tmp_path / f"train-{job}.out"  # --output=train-%j.out
    wait_for(cluster, job, lambda: job_state(cluster, job).get("JobState") == "COMPLETED", "the job to complete", log)
    state = job_state(cluster, job)
    assert (state["Requeue"], state["NumTasks"], state["JobName"]) == ("1", "2", "train")  # the #SBATCH lines were read
    run = tmp_path / "runs" / "regressor" / "default" / f"slurm-{job}"  # where the page says the run is
    saved = load_checkpoint(run / "last.ckpt")
    assert saved["loop"]["global_step"] == int(0.1 * 65536 / 256 / 2)  # DDP over the two tasks: each has half the batches
    assert "Traceback" not in log.read_text()


# ------------------------------------------------------------ a rank that comes back
def test_a_rank_that_dies_and_a_crash_during_a_save_are_survived_by_torchrun_restarts(reference, tmp_path):
    """`torchrun --max-restarts=2`, a checkpoint every 2 steps, `ckpt_path="last"`: in the first
    attempt rank 1 exits hard (`os._exit(1)`) before step 7; the second continues from the
    newest complete checkpoint and rank 0 dies halfway through writing step 8's; the third
    continues from step 6's (the cut file is a temporary, never picked) and finishes. In the
    restarted attempts rank 1 comes 2 s late: torchrun's store still holds the addresses of
    the previous attempt's ranks, which rank 0 must not take for the new ones."""
    done = run_torchrun(WORKER, str(tmp_path), str(tmp_path / "runs"), "every=2", "die=0:6", "die_in_save=1:8", "late=2",
                        cwd=tmp_path, timeout=BOUND_S, options=("--max-restarts=2", "--monitor-interval=0.5"))
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-6000:]
    assert "rank 1 exits hard at step 6" in output and "rank 0 dies while saving step 8" in output
    resumed = [int(n) for n in re.findall(r"Resumed from \S+: epoch \d+, optimizer step (\d+)", output)]
    assert resumed == [6, 6], output[-6000:]  # rank 0 says it, once per restart; step 8's cut save is skipped
    for rank in range(2):
        final = load(tmp_path / f"result.2.{rank}.pt")  # the third attempt (TORCHELASTIC_RESTART_COUNT=2)
        assert final["global_step"] == STEPS
        assert_equal(final["weights"], reference["results"][rank]["weights"])


# ------------------------------------------------------------------- two machines
def run_on_two_hosts(out: Path, *args: str) -> list[str]:
    """One torchrun agent per namespace (`--nnodes=2 --nproc_per_node=1`, c10d rendezvous at
    the first host's address); the outputs of both. Past BOUND_S both are killed and the test fails."""
    reason = netns.unavailable()
    if reason:
        pytest.skip(f"no network namespaces: {reason}")
    with netns.two_hosts() as hosts:
        processes = []
        for index, host in enumerate(hosts):
            env = torchrun_env()
            env["GLOO_SOCKET_IFNAME"] = host.interface  # Gloo's own address: this host's, not the shared hostname's
            command = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc_per_node=1",
                       "--rdzv_backend=c10d", f"--rdzv_endpoint={hosts[0].address}:29400", "--rdzv_id=two-hosts",
                       # the first host holds the rendezvous store; torchrun finds that out by the host
                       # name, which both namespaces share (on real machines it needs no telling)
                       f"--rdzv_conf=is_host={index == 0},join_timeout=120",
                       f"--local_addr={host.address}", str(WORKER), str(out), *args]
            processes.append(subprocess.Popen(host.wrap(command), cwd=out, env=env, stdout=subprocess.PIPE,
                                              stderr=subprocess.STDOUT, text=True, start_new_session=True))
        deadline, outputs = time.monotonic() + BOUND_S, []
        for host, process in zip(hosts, processes):
            try:
                outputs.append(process.communicate(timeout=max(1.0, deadline - time.monotonic()))[0])
            except subprocess.TimeoutExpired:
                for other in processes:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(other.pid, signal.SIGKILL)
                pytest.fail(f"the two-host run still ran after {BOUND_S} s:\n{process.communicate()[0][-4000:]}")
            assert process.returncode == 0, f"{host.name}:\n{outputs[-1][-4000:]}"
    return outputs


def test_two_hosts_train_like_one_machine_and_checkpoints_resume_across_the_layouts(reference, tmp_path):
    """Two namespaces joined by a veth pair, one agent in each: the first epoch there equals
    the first epoch of `torchrun --nproc_per_node=2` on one machine; its checkpoint, resumed
    on one machine, finishes as the uninterrupted one-machine run."""
    two = tmp_path / "two_hosts"
    two.mkdir()
    outputs = run_on_two_hosts(two, str(tmp_path / "runs"), "epochs=1")
    at_5 = load_checkpoint(reference["checkpoints"][5])["state_dict"]
    seen = [load(two / f"result.0.{rank}.pt") for rank in range(2)]
    for got in seen:
        assert (got["world_size"], got["global_step"]) == (2, 5)
        assert_equal(got["weights"], at_5)
    assert {got["interface"] for got in seen} == {f"lw{os.getpid()}a", f"lw{os.getpid()}b"}  # one rank on each host
    assert seen[0]["master_addr"] == seen[1]["master_addr"] in ("10.213.0.1", "10.213.0.2"), outputs[0][-2000:]
    one = tmp_path / "one_machine"
    one.mkdir()
    done = run_torchrun(WORKER, str(one), str(tmp_path / "runs"), cwd=one, timeout=BOUND_S)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "optimizer step 5" in done.stdout + done.stderr  # resumed from the two hosts' checkpoint
    for rank in range(2):
        final = load(one / f"result.0.{rank}.pt")
        assert final["global_step"] == STEPS
        assert_equal(final["weights"], reference["results"][rank]["weights"])
