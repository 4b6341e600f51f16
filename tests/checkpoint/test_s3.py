"""Checkpoints in an object store, against a real S3 server (moto's server mode, a process of its
own on 127.0.0.1; skipped with the reason where s3fs or moto is missing): a killed fit resumes
exactly from the bucket, retention never deletes what a run resumed from (there and on disk),
clear errors before the first step, remote reads and writes everywhere a path is taken."""

from __future__ import annotations

import random
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

import callbacks
from tests.helpers.reference import loader, make_data, make_model
from tests.helpers.s3 import S3Server, process_env, running_server
from trainer import Callback, Trainer
from trainer.checkpoint import CheckpointError, StorageError, load_checkpoint

ROOT = Path(__file__).resolve().parents[2]
WORKER = ROOT / "tests" / "helpers" / "scripts" / "s3_worker.py"


@pytest.fixture(scope="module")
def server() -> Iterator[S3Server]:
    with running_server() as running:
        yield running


@pytest.fixture(autouse=True)
def _in_tmp_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A URL root_dir keeps its logs in ./runs/<bucket>/...: here, under tmp_path."""
    monkeypatch.chdir(tmp_path)


def quiet(root: Any, **kwargs: Any) -> Trainer:
    base: dict[str, Any] = dict(logger=False, enable_progress_bar=False, enable_model_summary=False, device="cpu",
                                root_dir=root)
    return Trainer(**{**base, **kwargs})


class Steps(Callback):
    """Counts the optimizer steps a fit started (none may start before an error)."""

    def __init__(self) -> None:
        self.batches = 0

    def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, batch_idx: int) -> None:
        self.batches += 1


def _fs() -> Any:
    import s3fs

    return s3fs.S3FileSystem(skip_instance_cache=True)


# ---------------------------------------------------------------------------- a killed fit
def _launch(server: S3Server, cwd: Path, root: str, out: Path, kill: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run([sys.executable, str(WORKER), root, "run", str(out), kill], cwd=cwd, env=process_env(server),
                              capture_output=True, text=True, timeout=240)
    except subprocess.TimeoutExpired as error:  # subprocess.run has killed it
        pytest.fail(f"s3_worker {kill!r} still ran after 240 s: {error.stdout!r} {error.stderr!r}")


def test_fit_killed_during_saves_resumes_from_the_bucket_exactly(server: S3Server, tmp_path: Path) -> None:
    """SIGKILL inside an upload (part-way through its bytes, with every part uploaded but not
    committed, just after the commit), three times at random points; each rerun with
    ckpt_path='last' starts from a complete checkpoint, and the last one ends bit-identical to a
    run never interrupted."""
    from tests.helpers.scripts.s3_worker import fit

    bucket = server.bucket()
    root = f"s3://{bucket}/exp"
    seed = random.randrange(2**32)
    chooser = random.Random(seed)
    phases = ["bytes", "commit", "after"]
    chooser.shuffle(phases)
    plan = [f"{chooser.randint(1, 3)}:{phase}" + (f":{chooser.randint(1, 6_000_000)}" if phase == "bytes" else "")
            for phase in phases]
    out = tmp_path / "weights.pt"
    history = []
    started = -1
    for kill in [*plan, ""]:
        result = _launch(server, tmp_path, root, out, kill)
        starts = [line.split() for line in result.stdout.splitlines() if line.startswith("START ")]
        history.append((kill, result.returncode, starts, result.stderr[-600:]))
        context = f"plan {plan} (seed {seed}): {history}"
        assert starts, context
        _, resumed, step = starts[-1]
        assert "damaged" not in result.stderr, context  # nothing half-written was ever a candidate
        assert int(step) >= started, context  # never further back than where the previous launch began
        if resumed != "None":  # None: every upload so far was cut short (then nothing is there to resume)
            assert resumed.startswith(f"s3://{bucket}/exp/default/run/"), context
            load_checkpoint(resumed)  # what it resumed from is complete (CRC checked)
        started = int(step)
        if kill:
            assert result.returncode in (-9, 0), context  # 0: that launch made fewer uploads than the plan
        else:  # the "after" kill committed its upload: the last launch resumes
            assert result.returncode == 0 and resumed != "None", context
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the worker (OMP_NUM_THREADS=1)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            reference = fit(str(tmp_path / "local"), "reference")
    finally:
        torch.set_num_threads(threads)
    resumed_weights = torch.load(out, weights_only=True)
    for name, value in reference.state_dict().items():
        assert torch.equal(resumed_weights[name], value), f"{name} differs; plan {plan} (seed {seed}): {history}"
    listed = [Path(p).name for p in _fs().find(f"{bucket}/exp")]
    assert "last.ckpt" in listed and not any(name.startswith(".") for name in listed), listed


# ------------------------------------------------------- what a run resumed from is kept
@pytest.mark.parametrize("where", ["local", "s3"])
def test_top_k_never_deletes_the_checkpoint_the_run_resumed_from(where: str, request: pytest.FixtureRequest,
                                                                 tmp_path: Path) -> None:
    """save_top_k=1 without a monitor: a run resumed from a file of the same dirpath (or another
    one) writes its next file and keeps the file it resumed from; files it wrote itself still go."""
    base = f"s3://{request.getfixturevalue('server').bucket()}" if where == "s3" else str(tmp_path)
    first = f"{base}/one"

    def run(dirpath: str, steps: int, ckpt_path: str | None) -> callbacks.ModelCheckpoint:
        keep = callbacks.ModelCheckpoint(dirpath=dirpath, every_n_train_steps=2, save_top_k=1)
        quiet(f"{base}/root", max_steps=steps, callbacks=[keep], enable_checkpointing=False).fit(
            make_model(), loader(make_data(16), batch_size=4), ckpt_path=ckpt_path)
        return keep

    resumed_from = run(first, 2, None).best_model_path
    assert resumed_from.endswith("step=2.ckpt")
    same = run(first, 6, resumed_from)  # the #21813 case, in the same folder
    other = run(f"{base}/two", 8, same.best_model_path)  # and into another folder
    fs_exists = _fs().exists if where == "s3" else (lambda p: Path(p).exists())
    assert fs_exists(resumed_from), "the checkpoint the second run resumed from was deleted"
    assert fs_exists(same.best_model_path) and fs_exists(other.best_model_path)
    assert not fs_exists(f"{first}/epoch=0-step=4.ckpt")  # written and replaced by the second run itself


@pytest.mark.parametrize("where", ["local", "s3"])
def test_last_falls_back_past_a_damaged_object_and_keep_last_keeps_it(where: str, request: pytest.FixtureRequest,
                                                                       tmp_path: Path) -> None:
    """ckpt_path='last': a damaged newest last.ckpt is passed over (a warning names both), the run
    resumes from last-step=N, and keep_last_checkpoints never removes that file (in the bucket and on disk)."""
    root = f"s3://{request.getfixturevalue('server').bucket()}/exp" if where == "s3" else str(tmp_path / "exp")
    fs = _fs() if where == "s3" else None
    read, write = (fs.cat, fs.pipe) if where == "s3" else (lambda p: Path(p).read_bytes(), lambda p, b: Path(p).write_bytes(b))
    names = (lambda p: sorted(Path(x).name for x in fs.find(p))) if where == "s3" else (
        lambda p: sorted(x.name for x in Path(p).iterdir()))
    data = loader(make_data(16), batch_size=4)
    quiet(root, run_name="r", max_epochs=3, keep_last_checkpoints=2).fit(make_model(), data)
    last = f"{root}/default/r/last.ckpt"
    write(last, read(last)[:-100])  # the newest, truncated
    again = quiet(root, run_name="r", max_epochs=6, keep_last_checkpoints=2)
    with pytest.warns(UserWarning, match=r"last\.ckpt.*damaged.*last-step=8\.ckpt"):
        again.fit(make_model(), data, ckpt_path="last")
    assert again.ckpt_path == f"{root}/default/r/last-step=8.ckpt"
    assert names(f"{root}/default/r") == ["last-step=20.ckpt", "last-step=8.ckpt", "last.ckpt"]
    assert load_checkpoint(last)["global_step"] == 24
    if where == "s3":
        from trainer.checkpoint import RemotePath

        assert RemotePath(last).hints() == (24, True)  # how "last" ranks it without a download


# ------------------------------------------------------------------- before the first step
def test_missing_bucket_and_unreachable_endpoint_are_said_before_any_step(server: S3Server, tmp_path: Path) -> None:
    data = loader(make_data(8), batch_size=4)
    cases: list[tuple[dict[str, Any], str]] = [
        (dict(root_dir="s3://no-such-bucket-here/exp"), r"'s3://no-such-bucket-here/exp'.*bucket 'no-such-bucket-here' "
                                                        r"does not exist at http://127\.0\.0\.1"),
        (dict(root_dir=tmp_path, callbacks=[callbacks.ModelCheckpoint(dirpath="s3://no-such-bucket-here/ckpts")]),
         r"'s3://no-such-bucket-here/ckpts'.*bucket 'no-such-bucket-here' does not exist"),
        (dict(root_dir=f"s3://{server.bucket()}/exp", storage_options={"endpoint_url": "http://127.0.0.1:9"}),
         r"can't be reached.*AWS_ENDPOINT_URL"),
    ]
    for kwargs, expected in cases:
        steps = Steps()
        trainer = quiet(kwargs.pop("root_dir"), **{**kwargs, "callbacks": [steps, *kwargs.get("callbacks", [])]},
                        max_steps=2)
        with pytest.raises(StorageError, match=expected):
            trainer.fit(make_model(), data)
        assert steps.batches == 0 and trainer.global_step == 0
    with pytest.raises(StorageError, match="no-such-bucket-here.*does not exist"):
        quiet(tmp_path).fit(make_model(), data, ckpt_path="s3://no-such-bucket-here/x.ckpt")


def test_refused_credentials_are_said_before_any_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """A server that checks signatures (moto with authentication on): unknown keys are refused."""
    monkeypatch.setenv("INITIAL_NO_AUTH_ACTION_COUNT", "0")  # read by the server's process
    with running_server():
        steps = Steps()
        trainer = quiet("s3://some-bucket/exp", max_steps=2, callbacks=[steps],
                        storage_options={"key": "AKIAWRONGWRONGWRONG", "secret": "wrong"})
        with pytest.raises(StorageError, match=r"'s3://some-bucket/exp'.*credentials.*AWS_ACCESS_KEY_ID"):
            trainer.fit(make_model(), loader(make_data(8), batch_size=4))
        assert steps.batches == 0


# ----------------------------------------------------------- every place a path is taken
def test_paths_in_the_bucket_everywhere(server: S3Server, tmp_path: Path) -> None:
    """root_dir (logs stay local), async saves, ckpt_path='last' and 'best', save_checkpoint,
    load_from_checkpoint, a damaged object named in the error, `trainer export`."""
    bucket = server.bucket()
    root = f"s3://{bucket}/exp"
    data = loader(make_data(16), batch_size=4)
    best = callbacks.ModelCheckpoint(every_n_train_steps=4, save_top_k=1)
    first = Trainer(root_dir=root, max_epochs=2, enable_progress_bar=False, enable_model_summary=False, device="cpu",
                    async_checkpointing=True, callbacks=[best])
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tmp_path)
        first.fit(make_model(), data)
        local_logs = Path(first.log_dir)
        assert (tmp_path / local_logs).is_dir() and local_logs.parts[:2] == ("runs", bucket)
        assert not list((tmp_path / local_logs).glob("*.ckpt"))  # the checkpoints are in the bucket
        assert str(first.checkpoint_dir) == f"{root}/default/version_0"
        assert best.best_model_path.startswith(f"{root}/default/version_0/checkpoints/")
        resumed = Trainer(root_dir=root, max_epochs=3, enable_progress_bar=False, enable_model_summary=False,
                          device="cpu", async_checkpointing=True)
        model = make_model()
        resumed.fit(model, data, ckpt_path="last")  # a new machine would find the same run in the bucket
        assert resumed.ckpt_path == f"{root}/default/version_0/last.ckpt"
        assert str(resumed.checkpoint_dir) == f"{root}/default/version_0"
    uninterrupted = make_model()
    quiet(tmp_path / "plain", max_epochs=3).fit(uninterrupted, data)
    for name, value in uninterrupted.state_dict().items():
        assert torch.equal(model.state_dict()[name], value), name
    target = f"s3://{bucket}/elsewhere/saved.ckpt"
    resumed.save_checkpoint(target)
    loaded = type(model).load_from_checkpoint(target)
    for name, value in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], value), name
    assert quiet(tmp_path).validate(model, data, ckpt_path=best.best_model_path) is not None
    fs = _fs()
    raw = bytearray(fs.cat(target[len("s3://"):]))
    raw[len(raw) // 2] ^= 0xFF
    fs.pipe(target[len("s3://"):], bytes(raw))
    with pytest.raises(CheckpointError, match=rf"'{target}' is truncated or corrupt.*CRC-32"):
        type(model).load_from_checkpoint(target)
    from trainer.config.cli import main

    assert main(["export", f"{root}/default/version_0/last.ckpt", str(tmp_path / "weights.pt")]) == 0
    assert torch.equal(torch.load(tmp_path / "weights.pt", weights_only=True)["net.0.weight"],
                       loaded.state_dict()["net.0.weight"])  # the run's end, as saved above
    explicit = quiet(root, max_epochs=4)  # a path in the bucket: that run's folder goes on, as on disk
    explicit.fit(make_model(), data, ckpt_path=f"{root}/default/version_0/last.ckpt")
    assert str(explicit.checkpoint_dir) == f"{root}/default/version_0"
    assert load_checkpoint(f"{root}/default/version_0/last.ckpt")["global_step"] == 16


def test_sharded_checkpoints_may_go_to_a_url(server: S3Server) -> None:
    """FSDP's sharded checkpoints are written to a bucket too (tests/checkpoint/test_s3_sharded.py):
    the check before any step (root_dir, ModelCheckpoint's dirpath) only asks that the bucket answers,
    with background saves too."""
    from trainer.checkpoint.io import Checkpoints

    class Strategy:
        sharded_checkpoints, is_global_zero, world_size = True, True, 2

    class Args:
        storage_options = None

    class Context:
        strategy, args = Strategy(), Args()

    context = Context()  # held: the checkpoints keep only a weak reference to their run
    Checkpoints(context).check_location(f"s3://{server.bucket()}/run")  # type: ignore[arg-type]
    with pytest.raises(StorageError, match="does not exist"):
        Checkpoints(context).check_location("s3://no-such-bucket-here/run")  # type: ignore[arg-type]
    context.args.async_checkpointing = True  # type: ignore[attr-defined]
    Checkpoints(context).check_location(f"s3://{server.bucket()}/run")  # type: ignore[arg-type]


def test_the_server_answers_past_a_pipe_full_of_its_log(server: S3Server) -> None:
    """The server logs every request: its log must not block it once a pipe's worth (64 KiB) is
    written, or every client hangs (the fixture sends it to a file). 96 KiB of logged requests."""
    import urllib.error
    import urllib.request

    for _ in range(12):  # each request line is logged whole: 8 KiB each
        try:
            urllib.request.urlopen(f"{server.endpoint}/{'x' * 8192}", timeout=10).close()
        except urllib.error.HTTPError:  # refused (no signature): answered all the same
            pass


def test_storage_options_are_neither_logged_nor_saved(tmp_path: Path) -> None:
    """storage_options may hold credentials: kept out of the checkpoint's config and the logged hyperparameters."""
    from tests.helpers.reference import RecordingLogger

    class Hyperparameters(RecordingLogger):
        def log_hyperparams(self, params: Any, metrics: Any = None) -> None:
            self.params = params

    logger = Hyperparameters()
    trainer = quiet(tmp_path, max_steps=1, logger=logger, storage_options={"key": "AKIA-SEEN", "secret": "s3cr3t"})
    trainer.fit(make_model(), loader(make_data(8), batch_size=4))
    saved = load_checkpoint(trainer.save_checkpoint(tmp_path / "x.ckpt"))
    assert "s3cr3t" not in repr(saved) and "AKIA-SEEN" not in repr(saved)
    assert "s3cr3t" not in repr(logger.params) and "'storage_options'" not in repr(logger.params)


def test_the_s3_benchmark_runs(server: S3Server, capsys: pytest.CaptureFixture[str]) -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("s3_benchmark", ROOT / "benchmarks" / "s3_checkpoint.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    medians = bench.main(["--megabytes", "1", "--repeats", "1"])
    assert set(medians) == {"save disk", "save s3", "load disk", "load s3"} and all(v > 0 for v in medians.values())
    assert "| save |" in capsys.readouterr().out
