"""How a `Trainer(devices=N)` job started by a plain `python script.py` ends
(tests/helpers/scripts/launch_worker.py; trainer/strategies/launch.py).

tests/strategies/test_devices.py checks the launch itself: the same weights as torchrun, both ranks
running, a failing rank 1, `python -c`, a torchrun world size that differs, bad values.
Here: rank 0 (the process the user started) failing, interrupted or killed ends the whole
job within seconds and leaves no process behind; the signal handlers of rank 0 are the
ones it had; the `trainer` command with `--trainer.devices 2`.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WORKER = ROOT / "tests" / "helpers" / "scripts" / "launch_worker.py"
TORCHRUN_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "GROUP_RANK",
                "TORCHELASTIC_RUN_ID", "TRAINER_LAUNCHER_PID")
#: Every job here ends well within this; a job that hangs fails the test instead of the run.
BOUND_S = 60


def _env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in TORCHRUN_ENV}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT), TMPDIR=str(tmp))  # torch's log folder lands in tmp
    return env


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _gone(pid: int, within_s: float = 10.0) -> bool:
    """The process ended (an ended child of a living parent may linger briefly as a zombie)."""
    deadline = time.monotonic() + within_s
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not _alive(pid)


def _start(tmp: Path, mode: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(WORKER), str(tmp), mode], cwd=tmp, env=_env(tmp),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(job: subprocess.Popen[str], tmp: Path | None = None) -> tuple[int, str]:
    try:
        _, stderr = job.communicate(timeout=BOUND_S)
    except subprocess.TimeoutExpired:
        job.kill()
        for pid_file in (tmp.glob("pid_rank*") if tmp is not None else ()):  # ranks that outlive it hold the pipes
            try:
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
        try:
            _, stderr = job.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            stderr = "(no output: processes still hold the pipes)"
        pytest.fail(f"the job did not end within {BOUND_S} s:\n{stderr[-3000:]}")
    return job.returncode, stderr


def _pids(tmp: Path) -> list[int]:
    return [int((tmp / f"pid_rank{rank}").read_text()) for rank in (0, 1)]


@pytest.mark.slow
def test_a_normal_run_returns_0_keeps_the_signal_handlers_and_leaves_nothing(tmp_path):
    code, stderr = _finish(_start(tmp_path, "ok"), tmp_path)
    assert code == 0, stderr[-3000:]
    before, after = (tmp_path / "signals.txt").read_text().split(" | ")
    assert before == after  # torch's launcher replaces them in its caller; they are put back
    assert all(_gone(pid) for pid in _pids(tmp_path))
    assert not list(tmp_path.glob("trainer-devices-*"))  # torch's per-rank log folders are removed


@pytest.mark.slow
def test_rank_0_failing_ends_the_job_within_seconds(tmp_path):
    started = time.monotonic()
    code, stderr = _finish(_start(tmp_path, "fail0"), tmp_path)
    assert code == 1
    assert time.monotonic() - started < 40, "rank 1 was left waiting in a collective for rank 0"
    assert "RuntimeError: rank 0 fails on purpose" in stderr
    assert "devices=N: rank 0 failed (its error is printed above); ending ranks 1.." in stderr
    assert _gone(_pids(tmp_path)[1])
    assert not list(tmp_path.glob("trainer-devices-*"))


@pytest.mark.slow
def test_a_failing_rank_stops_rank_0_while_it_runs(tmp_path):
    """Rank 1 fails while rank 0 computes outside any collective (a minute): rank 0 watches the
    ranks it started, names the failed one, aborts its group and stops within seconds."""
    started = time.monotonic()
    code, stderr = _finish(_start(tmp_path, "fail1"), tmp_path)
    assert code != 0
    assert time.monotonic() - started < 40, "rank 0 noticed rank 1's failure only after its own step"
    assert "RuntimeError: rank 1 fails on purpose" in stderr
    assert "devices=N: rank 1 (exit code 1) failed while rank 0 is still running" in stderr, stderr[-3000:]
    assert (tmp_path / "stalled").exists() and all(_gone(pid) for pid in _pids(tmp_path))


def _wait_for_training(tmp: Path, job: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + BOUND_S
    while not (tmp / "training").exists():
        if job.poll() is not None or time.monotonic() > deadline:
            job.kill()
            pytest.fail(f"the job did not start training:\n{job.communicate()[1][-3000:]}")
        time.sleep(0.2)
    while not (tmp / "pid_rank1").exists():  # rank 1 trains too once rank 0 has made a step
        time.sleep(0.1)


@pytest.mark.slow
def test_ctrl_c_on_rank_0_ends_every_rank(tmp_path):
    """Ctrl-C reaches only rank 0 (torch starts the others in their own session): rank 0
    raises KeyboardInterrupt, then ends the others."""
    job = _start(tmp_path, "long")
    _wait_for_training(tmp_path, job)
    job.send_signal(signal.SIGINT)
    code, stderr = _finish(job, tmp_path)
    assert code != 0 and "KeyboardInterrupt" in stderr, stderr[-3000:]
    assert "SignalException" not in stderr  # torch's handler was not left in place
    assert _gone(_pids(tmp_path)[1])


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
def test_rank_0_killed_takes_the_other_ranks_with_it(tmp_path):
    """SIGKILL runs no exit handler in rank 0. Rank 1, busy outside any collective (where
    Gloo would notice the closed connection; NCCL may not for minutes), is ended by the
    kernel (PR_SET_PDEATHSIG) instead of running on alone."""
    job = _start(tmp_path, "stall1")
    deadline = time.monotonic() + BOUND_S
    while not (tmp_path / "stalled").exists():
        if job.poll() is not None or time.monotonic() > deadline:
            job.kill()
            pytest.fail(f"rank 1 did not reach its stall:\n{job.communicate()[1][-3000:]}")
        time.sleep(0.2)
    job.kill()
    job.wait(timeout=BOUND_S)
    rank_1 = _pids(tmp_path)[1]
    gone = _gone(rank_1)
    if not gone:
        os.kill(rank_1, signal.SIGKILL)  # leave nothing behind, then fail
    job.communicate(timeout=BOUND_S)  # rank 1 shared the pipes: they close once it is gone
    assert gone, "rank 1 outlived rank 0"


EXPERIMENT = """\
seed: 3
model:
  class_path: mypkg.models.TinyClassifier
  init_args: {hidden: 6, lr: 1e-1}
data:
  class_path: mypkg.data.RandomData
  init_args: {batch_size: 8}
trainer:
  max_epochs: 1
  enable_progress_bar: false
  device: cpu
"""


@pytest.mark.slow
@pytest.mark.parametrize("how", ["console script", "python -m trainer"])
def test_the_trainer_command_with_devices_2(tmp_path, how):
    """The other rank runs the same command line again: the `trainer` console script file
    (sys.argv[0]) with this Python, or `python -m trainer`."""
    shutil.copytree(ROOT / "tests" / "helpers" / "cli_pkg", tmp_path / "mypkg", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "exp.yaml").write_text(EXPERIMENT)
    command = [shutil.which("trainer") or "trainer"] if how == "console script" else [sys.executable, "-m", "trainer"]
    env = {**_env(tmp_path), "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    done = subprocess.run([*command, "fit", "exp.yaml", "--trainer.devices", "2"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=BOUND_S)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Process group gloo: rank 1 of 2 on cpu." in done.stderr  # rank 1 ran and joined
    assert "world_size 2" in done.stderr
    assert len(list(tmp_path.glob("runs/*/version_*/last.ckpt"))) == 1  # written by rank 0 only


@pytest.mark.slow
def test_rank_0_failing_before_fit_under_torchrun_ends_the_job_within_seconds(tmp_path):
    """Rank 0 raises between Trainer(...) and fit while rank 1 waits in fit's first collective:
    rank 0's exit releases the group at once instead of meeting rank 1 at a barrier (which
    waited 600 s)."""
    started = time.monotonic()
    job = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                            str(WORKER), str(tmp_path), "before0"], cwd=tmp_path, env=_env(tmp_path),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    code, stderr = _finish(job, tmp_path)
    assert code != 0 and "rank 0 fails before fit" in stderr
    assert time.monotonic() - started < 45, "the exit barrier waited for a rank stuck in a collective"
