"""The Trainer inside a real Jupyter kernel (ipykernel, driven by jupyter_client/nbclient).

- examples/notebook.ipynb executes top to bottom and prints what it promises;
- the stop button: a `KeyboardInterrupt` raised inside a training step at a known point, and
  a real SIGINT sent by `interrupt_kernel()`, leave the weights of the last completed
  optimizer step (equal to a run stopped there by `max_steps`), a checkpoint, closed
  writers and bars, the kernel's own SIGINT handler, and a kernel where `fit` works again;
- a fit cell run twice makes two run folders and leaks no handler, writer, bar or callback;
- `fit` again on a finished Trainer trains nothing and says so.

Every test is skipped, with the reason shown by `pytest -ra`, only when a kernel cannot start.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "examples" / "notebook.ipynb"
KERNEL_NAME = "loopwright-test"
TIMEOUT = 120


def _kernel_manager(spec_root: Path) -> Any:
    """A KernelManager whose kernel runs ipykernel on this very interpreter (no user kernelspec)."""
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager

    spec_dir = spec_root / KERNEL_NAME
    spec_dir.mkdir(parents=True, exist_ok=True)
    spec = {"argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "loopwright tests", "language": "python"}
    (spec_dir / "kernel.json").write_text(json.dumps(spec), encoding="utf-8")
    return KernelManager(kernel_name=KERNEL_NAME, kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(spec_root)]))


class Kernel:
    """Runs cells in one live kernel and collects what each cell printed."""

    def __init__(self, manager: Any, client: Any) -> None:
        self.manager, self.client = manager, client

    def start(self, code: str) -> str:
        return str(self.client.execute(textwrap.dedent(code)))

    def collect(self, msg_id: str, timeout: float = TIMEOUT) -> dict[str, Any]:
        """Outputs of the cell `msg_id` until the kernel is idle: stdout, stderr, error, displays."""
        out: dict[str, Any] = {"stdout": "", "stderr": "", "error": None, "displays": []}
        deadline = time.monotonic() + timeout
        while True:
            message = self.client.get_iopub_msg(timeout=max(deadline - time.monotonic(), 0.1))
            if message["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = message["msg_type"], message["content"]
            if kind == "stream":
                out[content["name"]] += content["text"]
            elif kind == "error":
                out["error"] = content
            elif kind == "display_data":
                out["displays"].append(sorted(content["data"]))
            elif kind == "status" and content["execution_state"] == "idle":
                return out

    def run(self, code: str, *, expect_error: str | None = None) -> dict[str, Any]:
        out = self.collect(self.start(code))
        error = out["error"]
        if expect_error is None:
            assert error is None, "cell failed:\n" + "\n".join(error["traceback"]) + out["stderr"]
        else:
            assert error is not None and error["ename"] == expect_error, f"expected {expect_error}, got {error}"
        return out

    def result(self, code: str) -> Any:
        """Run `code`, whose last line prints one JSON value, and return that value."""
        lines = self.run(code)["stdout"].strip().splitlines()
        return json.loads(lines[-1])


def _start_kernel(workdir: Path) -> Kernel:
    """A fresh kernel in `workdir`, or a skip (with its reason) when none can start."""
    # find_spec, not import: ipykernel must not end up imported in the test process itself
    missing = [name for name in ("ipykernel", "jupyter_client") if importlib.util.find_spec(name) is None]
    if missing:
        pytest.skip(f"no Jupyter kernel: {', '.join(missing)} not installed (pip install -e '.[dev]')")
    manager = _kernel_manager(workdir / "kernels")
    try:
        manager.start_kernel(cwd=str(workdir))
        client = manager.client()
        client.start_channels()
        client.wait_for_ready(timeout=60)
    except Exception as error:  # noqa: BLE001 - any failure to start is a reason to skip, shown by -ra
        if manager.has_kernel:
            manager.shutdown_kernel(now=True)
        pytest.skip(f"ipykernel could not start a kernel: {error!r}")
    return Kernel(manager, client)


def _stop_kernel(session: Kernel) -> None:
    session.client.stop_channels()
    session.manager.shutdown_kernel(now=True)


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kernel]:
    workdir = tmp_path_factory.mktemp("kernel")
    session = _start_kernel(workdir)
    try:
        session.run(SETUP.replace("WORKDIR", repr(str(workdir))))
        yield session
    finally:
        _stop_kernel(session)


# Defined in the kernel: 96 samples in 12 shuffled batches of 8, a small MLP with SGD+momentum.
SETUP = """
import json, logging, signal, threading
from pathlib import Path

import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset
from tqdm.auto import tqdm

from trainer import Callback, Module, Trainer

WORK = Path(WORKDIR)
torch.manual_seed(0)
X = torch.randn(96, 8)
Y = (X.sum(dim=1, keepdim=True) > 0).float()

def loader():
    return DataLoader(TensorDataset(X, Y), batch_size=8, shuffle=True)

class Net(Module):
    def __init__(self, interrupt_at_call=None):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
        self.calls, self.interrupt_at_call = 0, interrupt_at_call

    def training_step(self, batch, batch_idx):
        self.calls += 1
        x, y = batch
        loss = F.binary_cross_entropy_with_logits(self.net(x), y)
        if self.calls == self.interrupt_at_call:
            raise KeyboardInterrupt  # what the stop button raises, here inside the step
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)

def fresh(**kwargs):
    torch.manual_seed(1)
    return Net(**kwargs)

def quiet(**kwargs):
    return Trainer(seed=0, logger=False, enable_checkpointing=False, enable_progress_bar=False, **kwargs)

def same(a, b):
    return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))

def leaks():
    \"\"\"Open progress bars and live SummaryWriter threads in this process.\"\"\"
    writers = [t for t in threading.enumerate() if "AsyncWriter" in type(t).__name__ and t.is_alive()]
    return {"bars": len(getattr(tqdm, "_instances", ())), "writers": len(writers)}

KERNEL_SIGINT = signal.getsignal(signal.SIGINT)
"""

AFTER_STOP = """
def after_stop(stopped, model, run_like):
    \"\"\"What an interrupted fit left behind, against a run stopped at the same step by max_steps.\"\"\"
    reference = fresh()
    quiet(max_steps=stopped.global_step, **run_like).fit(reference, loader())
    path = stopped.log_dir / "last.ckpt"
    saved = torch.load(path, weights_only=True) if path.exists() else None
    return {
        "global_step": stopped.global_step,
        "same_as_max_steps": same(model, reference),
        "no_grads": all(p.grad is None for p in model.parameters()),
        "checkpoint_step": saved["loop"]["global_step"] if saved else None,
        "checkpoint_weights_equal": saved is not None and all(
            torch.equal(saved["module"][k], v) for k, v in model.state_dict().items()),
        "sigint_restored": signal.getsignal(signal.SIGINT) is KERNEL_SIGINT,
        "writer_closed": stopped.logger._writer is None,
        **leaks(),
    }
"""


def _interrupt_line(stderr: str) -> int:
    found = re.findall(r"Interrupted after optimizer step (\d+)\. Resume with", stderr)
    assert len(found) == 1, f"expected one resume hint, got: {stderr[-2000:]}"
    return int(found[0])


def _check_clean_stop(state: dict[str, Any], step: int) -> None:
    assert state["global_step"] == step
    assert state["same_as_max_steps"], "weights differ from a run stopped by max_steps at the same step"
    assert state["no_grads"], "a half-accumulated window's gradients were left on the parameters"
    assert state["checkpoint_step"] == step and state["checkpoint_weights_equal"]
    assert state["sigint_restored"], "fit left its own SIGINT handler installed in the kernel"
    assert state["writer_closed"] and state["writers"] == 0, "a SummaryWriter is still open"
    assert state["bars"] == 0, "a progress bar is still open"


def test_interrupt_inside_a_step_leaves_the_last_completed_step(kernel: Kernel) -> None:
    kernel.run(AFTER_STOP)
    # 12 batches per epoch, 2 per optimizer step: the 16th call is the 2nd micro-batch of
    # step 8, after the 1st has already put its gradients into the window.
    out = kernel.run("""
        model = fresh(interrupt_at_call=16)
        stopped = Trainer(max_epochs=3, accumulate_grad_batches=2, seed=0, root_dir=WORK / "simulated",
                          log_every_n_steps=2)
        stopped.fit(model, loader())
    """, expect_error="KeyboardInterrupt")
    assert _interrupt_line(out["stderr"]) == 7
    state = kernel.result("print(json.dumps(after_stop(stopped, model, {'accumulate_grad_batches': 2})))")
    _check_clean_stop(state, 7)

    # The next cells: the same Trainer continues the run at once (fit again), and a new
    # Trainer resumes from the interrupt's checkpoint; both end with the weights of a run
    # that was never interrupted.
    done = kernel.result("""
        import shutil
        interrupt_ckpt = shutil.copy(stopped.log_dir / "last.ckpt", WORK / "interrupt.ckpt")
        model.interrupt_at_call = None
        stopped.fit(model, loader())
        resumed = fresh()
        Trainer(max_epochs=3, accumulate_grad_batches=2, seed=0, root_dir=WORK / "simulated",
                log_every_n_steps=2).fit(resumed, loader(), ckpt_path=interrupt_ckpt)
        full = fresh()
        quiet(max_epochs=3, accumulate_grad_batches=2).fit(full, loader())
        print(json.dumps({"step": stopped.global_step, "continued": same(model, full), "resumed": same(resumed, full),
                          **leaks()}))
    """)
    assert done == {"step": 18, "continued": True, "resumed": True, "bars": 0, "writers": 0}


def test_real_interrupt_from_the_kernel_manager(kernel: Kernel, tmp_path: Path) -> None:
    kernel.run(AFTER_STOP)
    flag = tmp_path / "started"
    msg_id = kernel.start(f"""
        class Started(Callback):
            def on_train_step_end(self, trainer, module, stepped):
                if trainer.global_step == 5:
                    Path({str(flag)!r}).touch()

        live_model = fresh()
        live = Trainer(max_epochs=100_000, seed=0, root_dir=WORK / "real", log_every_n_steps=10, callbacks=[Started()])
        live.fit(live_model, loader())
    """)
    deadline = time.monotonic() + 60
    while not flag.exists():
        assert time.monotonic() < deadline, "the long fit never started"
        time.sleep(0.02)
    time.sleep(0.2)  # let it run a little: the interrupt lands at an arbitrary point
    kernel.manager.interrupt_kernel()
    out = kernel.collect(msg_id, timeout=60)
    assert out["error"] is not None and out["error"]["ename"] == "KeyboardInterrupt", out
    step = _interrupt_line(out["stderr"])
    assert step >= 5
    _check_clean_stop(kernel.result("print(json.dumps(after_stop(live, live_model, {})))"), step)
    again = kernel.result("""
        fresh_start = quiet(max_steps=3)
        fresh_start.fit(fresh(), loader())
        print(json.dumps(fresh_start.global_step))
    """)
    assert again == 3


FIT_CELL = """
counter = CountEpochs()
twice = Trainer(max_epochs=2, seed=0, root_dir=WORK / "twice", log_every_n_steps=2, callbacks=[counter])
twice_model = fresh()
twice.fit(twice_model, loader())
runs.append((twice, counter))
"""


def test_running_a_fit_cell_twice_makes_two_clean_runs(kernel: Kernel) -> None:
    kernel.run("""
        class CountEpochs(Callback):
            def __init__(self):
                self.epochs = 0
            def on_train_epoch_end(self, trainer, module):
                self.epochs += 1

        runs = []
        handlers = (len(logging.getLogger("trainer").handlers), len(logging.getLogger().handlers))
    """)
    kernel.run(FIT_CELL)
    kernel.run(FIT_CELL)
    state = kernel.result("""
        print(json.dumps({
            "folders": sorted(p.name for p in (WORK / "twice" / "default").iterdir()),
            "log_dirs": [t.log_dir.name for t, _ in runs],
            "events": [len(list(t.log_dir.glob("events.out.tfevents.*"))) for t, _ in runs],
            "checkpoints": [(t.log_dir / "last.ckpt").exists() for t, _ in runs],
            "callbacks": [len(t.callbacks) for t, _ in runs],
            "epoch_ends": [c.epochs for _, c in runs],
            "writers_closed": [t.logger._writer is None for t, _ in runs],
            "handlers_unchanged": handlers == (len(logging.getLogger("trainer").handlers), len(logging.getLogger().handlers)),
            **leaks(),
        }))
    """)
    assert state == {
        "folders": ["version_0", "version_1"], "log_dirs": ["version_0", "version_1"], "events": [1, 1],
        "checkpoints": [True, True], "callbacks": [1, 1], "epoch_ends": [2, 2], "writers_closed": [True, True],
        "handlers_unchanged": True, "bars": 0, "writers": 0,
    }


def test_fit_again_on_a_finished_trainer_trains_nothing_and_says_how_to_continue(kernel: Kernel) -> None:
    kernel.run("""
        done_model = fresh()
        done = Trainer(max_steps=4, seed=0, root_dir=WORK / "finished", log_every_n_steps=2)
        done.fit(done_model, loader())
        weights = {k: v.clone() for k, v in done_model.state_dict().items()}
    """)
    out = kernel.run("done.fit(done_model, loader())")
    assert "Nothing to train" in out["stderr"] and "max_steps=4" in out["stderr"]
    assert "ckpt_path" in out["stderr"], "the message should say how to train further"
    state = kernel.result("""
        print(json.dumps({"step": done.global_step,
                          "unchanged": all(torch.equal(v, weights[k]) for k, v in done_model.state_dict().items()),
                          "folders": len(list((WORK / "finished" / "default").iterdir())), **leaks()}))
    """)
    assert state == {"step": 4, "unchanged": True, "folders": 1, "bars": 0, "writers": 0}


FIT_WITH_VALIDATION = """
class WithValidation(Net):
    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val/loss", F.binary_cross_entropy_with_logits(self.net(x), y))

shown = Trainer(max_epochs=2, seed=0, logger=False, enable_checkpointing=False, log_every_n_steps=2)
shown.fit(WithValidation(), loader(), loader())
print(json.dumps(leaks()))
"""


def test_progress_bars_are_widgets_when_ipywidgets_is_present(kernel: Kernel) -> None:
    if importlib.util.find_spec("ipywidgets") is None:
        pytest.skip("ipywidgets is not installed (it is in the dev extra): widget bars cannot be checked")
    out = kernel.run(FIT_WITH_VALIDATION)
    widget = "application/vnd.jupyter.widget-view+json"
    # one widget per training epoch and one per validation run; nothing drawn as text
    assert sum(widget in mimes for mimes in out["displays"]) == 4, out["displays"]
    assert out["stderr"] == "", out["stderr"]
    assert json.loads(out["stdout"].splitlines()[-1]) == {"bars": 0, "writers": 0}


def _rendered(stream: str) -> list[str]:
    """The lines a notebook shows for a text stream: `\\r` rewrites the current line."""
    return [line.split("\r")[-1].rstrip() for line in stream.split("\n")]


def test_progress_bars_are_clean_text_without_ipywidgets(tmp_path: Path) -> None:
    session = _start_kernel(tmp_path)
    try:
        session.run("import sys; sys.modules['ipywidgets'] = None  # as if it were not installed")
        session.run(SETUP.replace("WORKDIR", repr(str(tmp_path))))
        out = session.run(FIT_WITH_VALIDATION)
    finally:
        _stop_kernel(session)
    assert out["displays"] == [] and "Warning" not in out["stderr"], out["stderr"]
    assert "\x1b[" not in out["stderr"], "cursor movement is not rendered in a cell: it leaves debris"
    lines = [line for line in _rendered(out["stderr"]) if line]
    assert [line.split(":")[0] for line in lines] == ["Epoch 0", "Epoch 1"], lines
    assert all("12/12" in line for line in lines)
    assert json.loads(out["stdout"].splitlines()[-1]) == {"bars": 0, "writers": 0}


def test_example_notebook_executes(tmp_path: Path) -> None:
    try:
        import nbformat
        from nbclient import NotebookClient
    except ImportError as error:
        pytest.skip(f"cannot execute notebooks: {error} (install the dev extra: pip install -e '.[dev]')")
    if importlib.util.find_spec("ipykernel") is None:
        pytest.skip("no Jupyter kernel: ipykernel not installed (pip install -e '.[dev]')")
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    assert all(not cell.get("outputs") for cell in notebook.cells if cell.cell_type == "code"), (
        "examples/notebook.ipynb is stored with outputs; clear them before committing")
    before = _files(NOTEBOOK.parent)
    manager = _kernel_manager(tmp_path / "kernels")
    client = NotebookClient(notebook, km=manager, timeout=TIMEOUT, resources={"metadata": {"path": str(NOTEBOOK.parent)}})
    try:
        client.execute()
    except Exception as error:  # a kernel that cannot start is a skip; a failing cell is not
        if not manager.has_kernel and "CellExecutionError" not in type(error).__name__:
            pytest.skip(f"ipykernel could not start a kernel: {error!r}")
        raise
    stdout, stderr = "", ""
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            assert output["output_type"] != "error", f"cell raised {output.get('ename')}: {output.get('evalue')}"
            if output["output_type"] == "stream":
                if output["name"] == "stdout":
                    stdout += output["text"]
                else:
                    stderr += output["text"]
    assert "Traceback" not in stdout + stderr
    assert float(re.search(r"bf16: val/acc ([0-9.]+) after 80 optimizer steps", stdout).group(1)) > 0.85  # type: ignore[union-attr]
    assert re.search(r"amp: val/acc [0-9.]+, loss scale \d+", stdout)
    assert "stopped after step 30, in epoch 1" in stdout and _interrupt_line(stderr) == 30
    assert "weights identical to the uninterrupted run: True" in stdout
    assert float(re.search(r"final test accuracy: ([0-9.]+)", stdout).group(1)) > 0.8  # type: ignore[union-attr]
    suggested = re.search(r"suggested lr: ([0-9.e+-]+) \(model unchanged by the sweep: (\w+)\)", stdout)
    assert suggested is not None and 1e-5 <= float(suggested.group(1)) <= 1.0 and suggested.group(2) == "True"
    runs = Path(re.search(r"runs go to (\S+)\n", stdout).group(1))  # type: ignore[union-attr]
    assert not runs.exists(), "the notebook should remove its runs folder"
    assert _files(NOTEBOOK.parent) == before, "the notebook wrote into examples/"


def _files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if "__pycache__" not in p.parts}
