"""SLURM: tasks started by `srun` (here: two `python` processes given SLURM's variables, Gloo
on loopback), requeue after SLURM's warning signal (a fake `scontrol` on PATH), and
collectives bounded by `DDP(timeout=...)` that end a job whose rank stalls, with a message
naming the wait. The worker is tests/helpers/scripts/slurm_worker.py.
"""

from __future__ import annotations

import datetime
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from tests.helpers.reference import make_data, make_model
from trainer import Callback, Trainer
from trainer.checkpoint import load_checkpoint
from trainer.distributed import DDP, FSDP, ClusterEnvironment, SingleDevice, resolve_strategy
from trainer.strategies.cluster import expand_hostlist
from trainer.strategies.launch import launch_processes
from trainer.strategies.requeue import REQUEUED_ENV

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals, SLURM")

ROOT = Path(__file__).resolve().parents[2]
WORKER = ROOT / "tests" / "helpers" / "scripts" / "slurm_worker.py"
#: Every job here ends well within this; one that hangs fails the test instead of the run.
BOUND_S = 120


# ------------------------------------------------------------------------ host lists
@pytest.mark.parametrize("hostlist,hosts", [
    ("a[1-3]", ["a1", "a2", "a3"]),
    ("a[01-03,7]", ["a01", "a02", "a03", "a7"]),  # each number keeps its own padding
    ("a1,b[2-3]", ["a1", "b2", "b3"]),
    ("a", ["a"]),
    ("node[01-03,7],gpu5", ["node01", "node02", "node03", "node7", "gpu5"]),
    ("n[08-10]", ["n08", "n09", "n10"]),
    ("rack[1-2]-n[1-2]", ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]),
    ("127.0.0.1", ["127.0.0.1"]),
])
def test_hostlist_expansion(hostlist, hosts):
    assert expand_hostlist(hostlist) == hosts


@pytest.mark.parametrize("bad", ["a[1-3", "a[3-1]", "a[x]", "", "a]["])
def test_malformed_hostlists_are_named(bad):
    with pytest.raises(ValueError, match="node list"):
        expand_hostlist(bad)


# ------------------------------------------------------------------ the environment
SLURM_2 = {"SLURM_NTASKS": "2", "SLURM_PROCID": "1", "SLURM_LOCALID": "1", "SLURM_NODELIST": "gpu[07-08],cpu1",
           "SLURM_JOB_ID": "123456"}


def test_two_srun_tasks_are_ranks_of_one_job():
    env = ClusterEnvironment.detect(SLURM_2)
    assert (env.kind, env.rank, env.world_size, env.local_rank) == ("slurm", 1, 2, 1)
    assert (env.main_address, env.main_port) == ("gpu07", 10000 + 123456 % 20000)
    assert env.init_method == "tcp://gpu07:13456"
    explicit = ClusterEnvironment.detect({**SLURM_2, "MASTER_ADDR": "10.0.0.5", "MASTER_PORT": "29555"})
    assert (explicit.main_address, explicit.main_port) == ("10.0.0.5", 29555)
    # srun's step variables win over the job's (a step may use fewer tasks and nodes)
    step = ClusterEnvironment.detect({**SLURM_2, "SLURM_NTASKS": "8", "SLURM_STEP_NUM_TASKS": "2",
                                      "SLURM_STEP_NODELIST": "gpu08", "SLURM_TASKS_PER_NODE": "4(x2)", "SLURM_NODEID": "1"})
    assert (step.world_size, step.main_address, step.local_world_size) == (2, "gpu08", 4)


def test_torchrun_wins_over_slurm():
    env = ClusterEnvironment.detect({**SLURM_2, "RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "0",
                                     "TORCHELASTIC_RUN_ID": "x"})
    assert (env.kind, env.rank, env.world_size, env.main_address) == ("torchrun", 3, 4, None)


def test_interactive_allocations_and_single_tasks_are_one_process(monkeypatch):
    salloc = {"SLURM_NTASKS": "4", "SLURM_JOB_ID": "99", "SLURM_NODELIST": "n[1-4]", "SLURM_JOB_NAME": "interactive"}
    assert ClusterEnvironment.detect(salloc).kind == "none"
    single = ClusterEnvironment.detect({**SLURM_2, "SLURM_NTASKS": "1", "SLURM_PROCID": "0", "SLURM_LOCALID": "0"})
    assert (single.kind, single.world_size) == ("slurm", 1)
    _clear_launch_variables(monkeypatch)
    for env in (salloc, {**SLURM_2, "SLURM_NTASKS": "1", "SLURM_PROCID": "0"}):
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        assert isinstance(resolve_strategy("auto", "cpu"), SingleDevice)
        for name in env:
            monkeypatch.delenv(name)


def test_devices_under_srun_must_match_the_tasks_per_node(monkeypatch):
    _clear_launch_variables(monkeypatch)
    for name, value in {**SLURM_2, "SLURM_NTASKS_PER_NODE": "2"}.items():
        monkeypatch.setenv(name, value)
    launch_processes(2)  # srun started both: nothing to start
    with pytest.raises(ValueError, match=r"devices=3\) under srun with 2 task\(s\).*ntasks-per-node=3"):
        launch_processes(3)


# ---------------------------------------------------------------------- validation
@pytest.mark.parametrize("bad", [0, -5, "5", True, float("nan"), datetime.timedelta(0), [5]])
def test_bad_timeouts_name_the_argument_and_the_accepted_values(bad):
    for strategy in (DDP, FSDP):
        with pytest.raises(ValueError, match=rf"{strategy.__name__}\(timeout=...\) expected a positive number of seconds "
                                             r"\(int or float\) or a datetime.timedelta, or None"):
            strategy(timeout=bad)


def test_timeouts_accept_seconds_and_timedeltas():
    assert DDP(timeout=90).timeout == datetime.timedelta(seconds=90)
    assert FSDP(timeout=datetime.timedelta(minutes=2)).timeout == datetime.timedelta(seconds=120)
    assert DDP(timeout=2.5).timeout == datetime.timedelta(seconds=2.5) and DDP().timeout is None
    assert "timeout=90" in repr(DDP(timeout=90))


@pytest.mark.parametrize("bad", ["SIGFOO", "SIGKILL", "INT", 10])
def test_bad_requeue_signals_name_the_argument_and_the_accepted_values(bad):
    with pytest.raises(ValueError, match=r"Trainer\(requeue_signal=...\): expected the name of the signal SLURM sends.*"
                                         r"'SIGUSR1'.*'SIGUSR2'"):
        Trainer(requeue_signal=bad, logger=False)


def test_requeue_arguments():
    assert Trainer(requeue_signal="usr2", logger=False).args.requeue_signal == "SIGUSR2"
    assert Trainer(requeue_signal=None, requeue=False, logger=False).args.requeue_signal is None
    with pytest.raises(ValueError, match=r"Trainer\(requeue=...\)"):
        Trainer(requeue="maybe", logger=False)


def test_yaml_builds_ddp_with_a_timeout():
    from trainer.config.classpath import check_spec, instantiate
    from trainer.strategies import Strategy

    for value, seconds in ((300, 300.0), (2.5, 2.5), ("PT5S", 5.0)):
        spec, problems = check_spec({"class_path": "trainer.distributed.DDP", "init_args": {"timeout": value}},
                                    "trainer.strategy", Strategy)
        assert not problems and spec is not None
        assert instantiate(spec).timeout == datetime.timedelta(seconds=seconds)


# ------------------------------------------------- the warning signal in one process
class Signal(Callback):
    """Sends `signum` to this process at a step, and records the handler fit installed."""

    def __init__(self, signum: int | None, at_step: int = 3) -> None:
        self.signum, self.at_step = signum, at_step
        self.seen: Any = None

    def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, batch_idx: int) -> None:
        if trainer.global_step == self.at_step:
            self.seen = signal.getsignal(signal.SIGUSR1)
            if self.signum is not None:
                os.kill(os.getpid(), self.signum)


def test_sigusr1_is_left_alone_outside_slurm(monkeypatch, tmp_path):
    _clear_launch_variables(monkeypatch)
    before = signal.getsignal(signal.SIGUSR1)
    probe = Signal(None)
    Trainer(max_steps=5, logger=False, enable_progress_bar=False, root_dir=tmp_path, callbacks=[probe]).fit(
        make_model(), DataLoader(make_data(), batch_size=4))
    assert probe.seen is before and signal.getsignal(signal.SIGUSR1) is before


def test_warning_signal_in_a_one_task_slurm_job_stops_saves_and_requeues_once(monkeypatch, tmp_path):
    _clear_launch_variables(monkeypatch)
    calls = _fake_scontrol(tmp_path, monkeypatch)
    monkeypatch.setenv("SLURM_JOB_ID", "4711")
    monkeypatch.setenv(REQUEUED_ENV, "")  # restored after the test: the run sets it
    before = signal.getsignal(signal.SIGUSR1)
    for attempt in range(2):  # a second stop in the same job (process) does not requeue it again
        probe = Signal(signal.SIGUSR1)
        run = Trainer(max_epochs=3, logger=False, enable_progress_bar=False, root_dir=tmp_path / f"runs{attempt}",
                      callbacks=[probe])
        run.fit(make_model(), DataLoader(make_data(), batch_size=4))
        assert probe.seen is not before and signal.getsignal(signal.SIGUSR1) is before  # restored when fit ended
        assert run.global_step == 4  # the step the signal landed in was finished, and nothing after it
        assert load_checkpoint(run.log_dir / "last.ckpt")["loop"]["global_step"] == 4
        assert calls.read_text().splitlines() == ["requeue 4711"]


def test_requeue_off_and_finished_runs_do_not_requeue(monkeypatch, tmp_path):
    _clear_launch_variables(monkeypatch)
    calls = _fake_scontrol(tmp_path, monkeypatch)
    monkeypatch.setenv("SLURM_JOB_ID", "4712")
    monkeypatch.setenv(REQUEUED_ENV, "")
    off = Trainer(max_epochs=3, logger=False, enable_progress_bar=False, root_dir=tmp_path, requeue=False,
                  callbacks=[Signal(signal.SIGUSR1)])
    off.fit(make_model(), DataLoader(make_data(), batch_size=4))
    assert off.global_step == 4 and (off.log_dir / "last.ckpt").exists()  # still a clean stop with a checkpoint
    finished = Trainer(max_steps=4, logger=False, enable_progress_bar=False, root_dir=tmp_path,
                       callbacks=[Signal(signal.SIGTERM)])
    finished.fit(make_model(), DataLoader(make_data(), batch_size=4))  # SIGTERM inside the last step: nothing left to run
    assert finished.global_step == 4
    assert not calls.exists()


# ------------------------------------------------------------ two srun tasks (Gloo)
@pytest.fixture(scope="module")
def full_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The uninterrupted job: as two srun tasks, as one srun task, and under torchrun."""
    out = tmp_path_factory.mktemp("full")
    timings: dict[str, float] = {}
    started = time.monotonic()
    results = run_slurm_job("train", out, out / "slurm_runs")
    timings["srun x2"] = time.monotonic() - started
    assert all(code == 0 for code, _, _ in results), results
    slurm = [torch.load(out / f"train_rank{r}.pt", weights_only=False) for r in range(2)]

    single_out = out / "single"
    single_out.mkdir()
    started = time.monotonic()
    [(code, _, err)] = run_slurm_job("train", single_out, single_out / "runs", world=1)
    timings["srun x1"] = time.monotonic() - started
    assert code == 0, err
    single = torch.load(single_out / "train_rank0.pt", weights_only=False)

    torchrun_out = out / "torchrun"
    torchrun_out.mkdir()
    env = _base_env(out)
    env.update(SLURM_JOB_ID="5", SLURM_NTASKS="1", SLURM_PROCID="0", SLURM_NODELIST="localhost")  # srun torchrun: torchrun wins
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(WORKER),
               "train", str(torchrun_out), str(torchrun_out / "runs")]
    started = time.monotonic()
    done = subprocess.run(command, cwd=out, env=env, capture_output=True, text=True, timeout=BOUND_S)
    timings["torchrun x2"] = time.monotonic() - started
    assert done.returncode == 0, done.stderr[-4000:]
    torchrun = [torch.load(torchrun_out / f"train_rank{r}.pt", weights_only=False) for r in range(2)]
    print(f"\nSLURM full runs: {', '.join(f'{k} {v:.1f} s' for k, v in timings.items())}")
    return {"slurm": slurm, "single": single, "torchrun": torchrun}


@pytest.mark.slow
def test_two_srun_tasks_train_to_the_weights_of_torchrun(full_runs):
    slurm, torchrun = full_runs["slurm"], full_runs["torchrun"]
    for rank in range(2):
        assert (slurm[rank]["rank"], slurm[rank]["world_size"], slurm[rank]["strategy"]) == (rank, 2, "DDP")
        assert torchrun[rank]["world_size"] == 2 and slurm[rank]["global_step"] == torchrun[rank]["global_step"] == 10
        _assert_equal(slurm[rank]["weights"], torchrun[rank]["weights"])
    _assert_equal(slurm[0]["weights"], slurm[1]["weights"])


@pytest.mark.slow
def test_one_srun_task_is_a_single_process_run(full_runs):
    single = full_runs["single"]
    assert (single["world_size"], single["strategy"], single["global_step"]) == (1, "Strategy", 20)  # SingleDevice


@pytest.mark.slow
def test_warning_signal_on_one_rank_stops_every_rank_and_requeues_once(full_runs, tmp_path, monkeypatch):
    calls = _fake_scontrol(tmp_path, monkeypatch)
    root, job = tmp_path / "runs", _job_id()
    started = time.monotonic()
    first = start_slurm_job("signal", tmp_path, root, "signal_rank=1", job=job)
    _wait_for(tmp_path / "handshake", first)
    first[1].send_signal(signal.SIGUSR1)  # to rank 1 only, inside its step 6
    results = _finish(first)
    took = time.monotonic() - started
    for rank, (code, out, err) in enumerate(results):
        assert code == 0, err[-4000:]
        assert f"rank {rank} of 2: global_step 8" in out  # agreed at the next logging step, the same on both
    assert "Stopped on SIGUSR1 after optimizer step 8" in results[1][2]
    [last] = root.glob("**/last.ckpt")
    saved = load_checkpoint(last)
    assert saved["loop"]["global_step"] == 8 and saved["cut"]["clean"]
    assert calls.read_text().splitlines() == [f"requeue {job}"]  # once, from rank 0

    # the requeued job: the same command (same job id), ckpt_path="last"
    started_resume = time.monotonic()
    resumed = run_slurm_job("train", tmp_path, root, "ckpt=last", job=job)
    assert all(code == 0 for code, _, _ in resumed), resumed
    print(f"\nrequeue: signal to exit {took:.1f} s, resume {time.monotonic() - started_resume:.1f} s")
    assert calls.read_text().splitlines() == [f"requeue {job}"]  # no signal this time: not requeued again
    for rank in range(2):
        got = torch.load(tmp_path / f"train_rank{rank}.pt", weights_only=False)
        assert got["global_step"] == 10
        _assert_equal(got["weights"], full_runs["slurm"][rank]["weights"])


@pytest.mark.slow
def test_with_requeue_off_the_signal_stops_cleanly_without_scontrol(tmp_path, monkeypatch):
    calls = _fake_scontrol(tmp_path, monkeypatch)
    job = start_slurm_job("signal", tmp_path, tmp_path / "runs", "signal_rank=0", "requeue=off")
    _wait_for(tmp_path / "handshake", job)
    job[0].send_signal(signal.SIGUSR1)
    for rank, (code, out, err) in enumerate(_finish(job)):
        assert code == 0 and "global_step 8" in out, err[-4000:]
    assert not calls.exists()


@pytest.mark.slow
@pytest.mark.parametrize("where,waits_in", [
    ("step", "the gradient all-reduce that DDP/FSDP runs during backward"),
    ("epoch_end", "reduce_epoch -> all_gather_object, called from MetricStore.close_epoch"),
])
def test_a_stalled_rank_ends_the_job_on_every_rank_within_the_timeout(tmp_path, where, waits_in):
    timeout = 5.0
    job = start_slurm_job("stall", tmp_path, tmp_path / "runs", f"timeout={timeout}", "stall_rank=1", f"where={where}")
    _wait_for(tmp_path / "stalled", job)
    stalled_at = float((tmp_path / "stalled").read_text())
    ended: dict[int, float] = {}
    deadline = time.monotonic() + BOUND_S
    while len(ended) < 2 and time.monotonic() < deadline:
        for rank, process in enumerate(job):
            if rank not in ended and process.poll() is not None:
                ended[rank] = time.time() - stalled_at
        time.sleep(0.05)
    results = _finish(job)
    print(f"\nstalled rank ({where}), DDP(timeout={timeout:g}): rank 0 ended after {ended.get(0, -1):.1f} s, "
          f"rank 1 (stalled) after {ended.get(1, -1):.1f} s")
    assert set(ended) == {0, 1}, results
    assert max(ended.values()) < timeout + 8, ended  # instead of Gloo's 30 minutes (2 shared cores: some slack)
    assert all(code != 0 for code, _, _ in results)
    waiting = results[0][2]
    assert "CollectiveError: Rank 0 of 2 stopped waiting" in waiting and waits_in in waiting, waiting[-4000:]
    assert "DDP(timeout=5)" in waiting
    assert "rank 1 did not arrive: it was at " in waiting  # where the stalled rank's main thread was
    assert ("Stalling._stall" in waiting)  # ...its own function, named
    stalled = results[1][2]
    assert "Rank 1 of 2: rank(s) 0 gave up waiting" in stalled and "time.sleep(120)" in stalled, stalled[-4000:]


@pytest.mark.slow
def test_a_task_whose_peers_never_come_says_so_within_the_timeout(tmp_path):
    """`python train.py` in the batch script instead of `srun python train.py`: task 0 of 2
    alone. With a timeout it fails after it, saying what to do."""
    env = _base_env(tmp_path)
    env.update(SLURM_NTASKS="2", SLURM_PROCID="0", SLURM_LOCALID="0", SLURM_NODELIST="localhost", SLURM_JOB_ID=str(_job_id()))
    code = "from trainer import Trainer; from trainer.distributed import DDP; Trainer(strategy=DDP(timeout=3), device='cpu')"
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=BOUND_S)
    assert done.returncode != 0 and time.monotonic() - started < 30
    assert "Rank 0 of 2 could not form the process group (srun (task 0 of 2, rank 0 at localhost:" in done.stderr
    assert "every task must be started by srun" in done.stderr, done.stderr[-3000:]


# ------------------------------------------------------------------------- helpers
LAUNCH_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT",
                    "TORCHELASTIC_RUN_ID", "TRAINER_LAUNCHER_PID", REQUEUED_ENV)


def _clear_launch_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name in LAUNCH_VARIABLES or name.startswith("SLURM_"):
            monkeypatch.delenv(name)


def _base_env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARIABLES and not k.startswith("SLURM_")}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT), TMPDIR=str(tmp))
    return env


def _job_id() -> int:
    """A job id whose port (10000 + id % 20000) is free now: the tasks find rank 0 there."""
    for _ in range(200):
        port = 10000 + int.from_bytes(os.urandom(2), "little") % 20000
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        return 3_000_000 + (port - 10000)  # 3_000_000 % 20000 == 0
    raise RuntimeError("no free port in 10000-29999")


def start_slurm_job(mode: str, out: Path, root: Path, *options: str, world: int = 2, job: int | None = None) -> list[subprocess.Popen[str]]:
    """`srun --ntasks=world python slurm_worker.py ...`, as srun would start it: SLURM's variables only."""
    job = job if job is not None else _job_id()
    processes = []
    for rank in range(world):
        env = _base_env(out)
        env.update(SLURM_NTASKS=str(world), SLURM_PROCID=str(rank), SLURM_LOCALID=str(rank), SLURM_NODELIST="localhost",
                   SLURM_JOB_ID=str(job), SLURM_NTASKS_PER_NODE=str(world))
        processes.append(subprocess.Popen([sys.executable, str(WORKER), mode, str(out), str(root), *options], cwd=out,
                                          env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    return processes


def run_slurm_job(mode: str, out: Path, root: Path, *options: str, world: int = 2, job: int | None = None) -> list[tuple[int, str, str]]:
    return _finish(start_slurm_job(mode, out, root, *options, world=world, job=job))


def _finish(processes: list[subprocess.Popen[str]]) -> list[tuple[int, str, str]]:
    results = []
    for process in processes:
        try:
            out, err = process.communicate(timeout=BOUND_S)
        except subprocess.TimeoutExpired:
            for other in processes:
                other.kill()
            out, err = process.communicate()
        results.append((process.returncode, out, err))
    return results


def _wait_for(path: Path, processes: list[subprocess.Popen[str]], timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if any(p.poll() is not None for p in processes) or time.monotonic() > deadline:
            results = _finish(processes)
            raise AssertionError(f"{path.name} never appeared: {[(c, e[-3000:]) for c, _, e in results]}")
        time.sleep(0.01)


def _fake_scontrol(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """`scontrol` on PATH that records its arguments, one call a line; returns that file."""
    folder, calls = tmp / "bin", tmp / "scontrol_calls.txt"
    folder.mkdir(exist_ok=True)
    script = folder / "scontrol"
    script.write_text(f'#!/bin/sh\necho "$@" >> "{calls}"\n')
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ.get('PATH', '')}")
    return calls


def _assert_equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key
