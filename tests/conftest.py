"""Shared test setup.

The suite runs its own launchers (torchrun, fake SLURM tasks) on loopback. Run inside a real
SLURM job or torchrun, the inherited variables would make every Trainer join that job
(or call the real `scontrol requeue`), so they are removed before any test starts.
"""

from __future__ import annotations

import os

_LAUNCHER_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                       "TORCHELASTIC_RUN_ID", "GROUP_RANK", "ROLE_RANK")
for _name in list(os.environ):
    if _name.startswith("SLURM_") or _name in _LAUNCHER_VARIABLES:
        del os.environ[_name]


import pytest  # noqa: E402


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist each worker (and the processes its tests start, unless a test sets
    OMP_NUM_THREADS itself) takes its share of the cores for torch's intra-op threads: with
    every worker on every core, OpenMP's spinning threads contend and a test takes up to ten
    times as long."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        import torch

        threads = max(1, (os.cpu_count() or 1) // workers)
        torch.set_num_threads(threads)
        os.environ.setdefault("OMP_NUM_THREADS", str(threads))  # the processes a test starts too


@pytest.fixture(autouse=True)
def _the_cpu_suite_means_the_cpu(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests not marked `gpu` compare with CPU references: on a machine with a GPU,
    `Trainer(device="auto")` still resolves to the CPU in them (a test that names a device gets
    it; workers started as subprocesses name theirs). The GPU suite (`pytest -m gpu`) sees
    the real choice. Without a GPU this changes nothing."""
    import torch

    if request.node.get_closest_marker("gpu") is not None or not torch.cuda.is_available():
        return
    from trainer.strategies import base

    original = base.resolve_device
    monkeypatch.setattr(base, "resolve_device", lambda device: original("cpu" if device == "auto" else device))


_REPOSITORY_RUNS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "runs")


@pytest.fixture(autouse=True)
def _nothing_written_into_the_repository() -> object:
    """A test that leaves `runs/` in the repository (a Trainer without `root_dir` run from the
    repository's folder) fails, naming itself; checked only where `runs/` did not exist yet."""
    existed = os.path.exists(_REPOSITORY_RUNS)
    yield
    if not existed and os.path.exists(_REPOSITORY_RUNS):
        import shutil

        shutil.rmtree(_REPOSITORY_RUNS, ignore_errors=True)
        pytest.fail("this test wrote runs/ into the repository: give its Trainer a root_dir (tmp_path)")


@pytest.fixture(autouse=True)
def _rank_zero_restored() -> object:
    """A multi-process strategy sets `rank_zero_only.rank` to its rank (Lightning's rule); a test
    that builds one for rank 1 in this process must not leave every later test on rank 1."""
    from trainer.strategies.rank_zero import rank_zero_only

    rank = getattr(rank_zero_only, "rank", 0)
    yield
    rank_zero_only.rank = rank  # type: ignore[attr-defined]


@pytest.fixture(autouse=True)
def _seed_variables_restored() -> object:
    """`seed_everything(..., workers=True)` (ours or Lightning's, run by the comparisons) sets
    `PL_SEED_WORKERS`, which makes every later Trainer seed its DataLoader workers; each test
    starts from the environment the suite started with."""
    saved = {name: os.environ.get(name) for name in ("PL_SEED_WORKERS", "PL_GLOBAL_SEED")}
    yield
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture(autouse=True)
def _torch_switches_restored() -> object:
    """Lightning's `Trainer(deterministic=True)` (run by the comparisons) turns torch's global
    switches on for good; each test starts from the ones the suite started with."""
    import torch

    deterministic = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    cudnn = (torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic)
    yield
    torch.use_deterministic_algorithms(deterministic, warn_only=warn_only)
    torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = cudnn
