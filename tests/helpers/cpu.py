"""What this CPU's kernels can run under autocast, asked once per process by running the op.

The CPU kernels behind some layers come from oneDNN, which builds them only for some
instruction sets: an `nn.LSTM` under bfloat16 autocast needs AVX-512 and raises "could not
create a primitive descriptor for the LSTM forward propagation primitive" on a CPU with AVX2
only (many AMD EPYC and older Intel machines); under float16 autocast it fails on most CPUs.
A test that depends on such an op either falls back where the CPU lacks it (the op runs in
float32, in the test and its reference alike) or carries `requires_autocast(...)`, which skips
it with the reason. The probe runs the op itself, so it answers for this process as it is:
`ONEDNN_MAX_CPU_ISA=AVX2` (tests/test_cpu_features.py) makes this machine answer as an AVX2 one.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable

import pytest
import torch
from torch import nn

__all__ = ["autocast_failure", "autocast_supports", "requires_autocast", "OPS"]


def _lstm() -> nn.Module:
    return nn.LSTM(4, 4, batch_first=True)


def _linear() -> nn.Module:
    return nn.Linear(4, 4)


#: op name -> (a tiny module, its input's shape)
OPS: dict[str, tuple[Callable[[], nn.Module], tuple[int, ...]]] = {
    "lstm": (_lstm, (2, 3, 4)),
    "linear": (_linear, (2, 4)),
}

_NAMES = {torch.bfloat16: "bfloat16", torch.float16: "float16"}
#: the instruction sets oneDNN builds these kernels for (x86-64)
_NEEDS = {("lstm", torch.bfloat16): "AVX-512 (avx512_core)"}


@functools.cache
def autocast_failure(op: str, dtype: torch.dtype) -> str | None:
    """None when `op` (a key of OPS) runs forward and backward under CPU autocast to `dtype`;
    otherwise why not, naming the CPU capability torch and oneDNN see. Leaves the global RNG
    as it was (the tests compare seeded runs) and may be asked from inside a forward, a
    `no_grad` or an `inference_mode` block."""
    build, shape = OPS[op]
    with torch.random.fork_rng(devices=[]), torch.inference_mode(False), torch.enable_grad():
        module, x = build(), torch.zeros(shape)
        try:
            with torch.autocast("cpu", dtype=dtype):
                out = module(x)
                out = out[0] if isinstance(out, tuple) else out
            out.float().sum().backward()
        except RuntimeError as error:
            limit = os.environ.get("ONEDNN_MAX_CPU_ISA")
            seen = f"torch's CPU capability {torch.backends.cpu.get_cpu_capability()}" + (
                f", ONEDNN_MAX_CPU_ISA={limit}" if limit else "")
            first = (str(error).strip() or type(error).__name__).splitlines()[0].split(". ")[0]
            needs = f", which needs {_NEEDS[op, dtype]}" if (op, dtype) in _NEEDS else ""
            return f"this CPU cannot run a {_NAMES.get(dtype, dtype)} {op} under autocast{needs} ({seen}): {first}"
    return None


def autocast_supports(op: str, dtype: torch.dtype | None) -> bool:
    """Whether `op` runs under CPU autocast to `dtype` here (`None`: no autocast, always)."""
    return dtype is None or autocast_failure(op, dtype) is None


def requires_autocast(op: str, dtype: torch.dtype) -> pytest.MarkDecorator:
    """Skip the test, with the reason, where this CPU cannot run `op` under autocast to `dtype`."""
    failure = autocast_failure(op, dtype)
    return pytest.mark.skipif(failure is not None, reason=failure or "")
