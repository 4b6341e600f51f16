"""The suite passes on every x86-64 CPU, AVX-512 or not.

Some CPU kernels under autocast exist only for some instruction sets (tests/helpers/cpu.py):
the tests that use them fall back or skip, with the reason, where the CPU lacks them. This
checks that on a CPU with AVX2 only (many AMD EPYC machines), made of this one by capping
what oneDNN and ATen may use (`ONEDNN_MAX_CPU_ISA=AVX2`, `ATEN_CPU_CAPABILITY=avx2`): each
of those tests, run in a process with the cap, passes or skips naming what the CPU lacks;
none fails.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.helpers.cpu import autocast_supports, requires_autocast
from tests.helpers.reference import TinyNet, assert_same_weights, loader, make_data, reference_fit
from trainer import Trainer

ROOT = Path(__file__).resolve().parents[1]
AVX2_ONLY = {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}
#: the tests that run an op some CPUs lack under autocast (an LSTM in bfloat16 or float16)
DEPENDS_ON_CPU_FEATURES = ["tests/examples/test_mnist_rnn.py::test_mnist_rnn",
                           "tests/test_cpu_features.py::test_a_bf16_lstm_trains_to_the_hand_written_loop_s_weights"]
QUIET = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False, device="cpu")
x86_64 = pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"),
                            reason="ONEDNN_MAX_CPU_ISA=AVX2 caps an x86-64 CPU")


def _avx2_only_env(cache: Path) -> dict[str, str]:
    # Its own inductor cache: a kernel compiled under the cap must never be found by an uncapped run.
    return {**os.environ, **AVX2_ONLY, "PYTHONPATH": str(ROOT), "TORCHINDUCTOR_CACHE_DIR": str(cache),
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}


def test_the_probe_answers_what_running_the_op_answers() -> None:
    for dtype in (torch.bfloat16, torch.float16):
        try:
            with torch.autocast("cpu", dtype=dtype):
                torch.nn.LSTM(3, 3)(torch.zeros(2, 1, 3))
            runs = True
        except RuntimeError:
            runs = False
        assert autocast_supports("lstm", dtype) == runs
    assert autocast_supports("linear", torch.bfloat16) and autocast_supports("lstm", None)


class LSTMNet(TinyNet):
    """TinyNet's six inputs read as a sequence of two steps by an LSTM."""

    def __init__(self) -> None:
        super().__init__(dropout=0.1)
        self.rnn = torch.nn.LSTM(3, 8, batch_first=True)
        self.net = torch.nn.Sequential(torch.nn.Dropout(0.1), torch.nn.Linear(8, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(x.reshape(len(x), 2, 3))
        assert out.dtype == (torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else torch.float32)
        return self.net(out[:, -1])


@requires_autocast("lstm", torch.bfloat16)
def test_a_bf16_lstm_trains_to_the_hand_written_loop_s_weights() -> None:
    """Under bf16 the LSTM itself runs in bfloat16 (where the CPU can): the test needs the CPU
    feature, so it skips, naming it, on a CPU without."""
    torch.manual_seed(0)
    ours, theirs = LSTMNet(), LSTMNet()
    theirs.load_state_dict(ours.state_dict())
    torch.manual_seed(1)
    Trainer(precision="bf16", max_epochs=2, **QUIET).fit(ours, loader(make_data()))
    torch.manual_seed(1)
    reference_fit(theirs, loader(make_data()), precision="bf16", epochs=2)
    assert_same_weights(ours, theirs)


@x86_64
@pytest.mark.slow
def test_on_a_cpu_with_avx2_only_the_cpu_dependent_tests_pass_or_skip_with_the_reason(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-k", "bf16 or amp",
         *DEPENDS_ON_CPU_FEATURES],
        env=_avx2_only_env(tmp_path / "inductor"), cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert " passed" in done.stdout, done.stdout[-2000:]
    skips = [line for line in done.stdout.splitlines() if line.startswith("SKIPPED")]
    assert all("this CPU cannot run" in line for line in skips), skips
    # the cap took effect: the test that needs a bfloat16 LSTM skipped, naming what it needs
    (lstm,) = [line for line in skips if "test_cpu_features.py" in line]
    assert "bfloat16 lstm" in lstm and "AVX-512" in lstm and "ONEDNN_MAX_CPU_ISA=AVX2" in lstm, lstm
