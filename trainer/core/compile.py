"""`Trainer(compile=...)`: what is compiled, what is refused, and the check that it ran.

- **What runs is compiled.** A module that defines `forward` has it compiled (what `self(x)`
  calls). One without a `forward` (its `training_step` calls `self.net(x)`, the usual
  Lightning shape) gets its outermost submodules that have a `forward` and parameters
  compiled instead. Either way in place, so `state_dict()` keys keep their names.
- **It is checked.** After the first training step, if none of the compiled modules ran (the
  module defines `forward` but `training_step` calls its submodules directly) a warning
  says so, once: otherwise `compile=True` would silently do nothing.
- **CUDA graphs and accumulation are refused** at construction: `mode="reduce-overhead"`
  (and `"max-autotune"`, or `options={"triton.cudagraphs": True}`) replays each graph into
  the same memory, so gradients accumulated over several micro-batches (and DDP's no_sync
  windows) would live in memory a later replay reuses.
- **No reference cycle.** `nn.Module.compile` stores a compiled *bound* method on the module
  (module -> compiled function -> module), which only the cyclic garbage collector frees;
  here the compiled function is `nn.Module._call_impl` itself and the module is held weakly,
  so a finished run's module (and its GPU memory) is freed when the last reference goes.
"""

from __future__ import annotations

import logging
import warnings
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import torch

__all__ = ["check_compile_options", "compile_module", "uses_cuda_graphs", "FirstStepCheck"]

log = logging.getLogger("trainer")

# A compiled module's CompileProbe (a later fit reuses it). Beside the module, not on it: a
# copy or pickle of the module is eager (nn.Module drops _compiled_call_impl) and has none.
_PROBES: weakref.WeakKeyDictionary[torch.nn.Module, CompileProbe] = weakref.WeakKeyDictionary()


def uses_cuda_graphs(options: Mapping[str, Any]) -> bool:
    """Whether `torch.compile(**options)` captures CUDA graphs on a GPU."""
    inductor = options.get("options") or {}
    flag = inductor.get("triton.cudagraphs") if isinstance(inductor, Mapping) else None
    if flag is not None:
        return bool(flag)
    return options.get("mode") in ("reduce-overhead", "max-autotune")


def check_compile_options(compile: bool | Mapping[str, Any], accumulate_grad_batches: int, later: bool = False) -> None:
    """Refuse CUDA graphs with gradient accumulation (see the module's docstring); `later`: the
    accumulation is set after construction (`trainer.accumulate_grad_batches = k`, as
    `GradientAccumulationScheduler` does).

    Raises:
        ValueError: naming both arguments and what to write instead.
    """
    if not isinstance(compile, Mapping) or not uses_cuda_graphs(compile) or accumulate_grad_batches <= 1:
        return
    given = (f"Trainer(compile={dict(compile)!r}) with trainer.accumulate_grad_batches = {accumulate_grad_batches} "
             "(set after construction, e.g. by GradientAccumulationScheduler)" if later else
             f"Trainer(compile={dict(compile)!r}, accumulate_grad_batches={accumulate_grad_batches})")
    raise ValueError(
        f"{given}: CUDA graphs "
        "(mode 'reduce-overhead' or 'max-autotune', or options triton.cudagraphs) replay every step into the "
        "same memory, and gradients accumulated over several micro-batches (DDP's no_sync windows too) would "
        "live in memory a later replay reuses: wrong gradients, or CUDAGraphs' 'overwritten by a subsequent "
        "run' error. Expected accumulate_grad_batches=1 with CUDA graphs, or mode 'default' / "
        "'max-autotune-no-cudagraphs' with accumulation."
    )


def _call(module: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
    """The frame dynamo compiles: the module's call (hooks and forward), with the module an
    argument. A frame of this file, not torch's: dynamo does not start tracing inside torch.nn,
    so a bare `nn.Sequential` compiles too (as `torch.compile(module)` makes a frame for it)."""
    return module._call_impl(*args, **kwargs)


class _CompiledCall:
    """What `nn.Module.compile` puts in `module._compiled_call_impl`, holding the module weakly."""

    __slots__ = ("compiled", "module", "ran", "__weakref__")

    def __init__(self, module: torch.nn.Module, options: Mapping[str, Any]) -> None:
        self.compiled = torch.compile(_call, **options)
        self.module = weakref.ref(module)
        self.ran = False

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.ran = True
        module = self.module()
        assert module is not None, "a module's own __call__ runs only while the module exists"
        return self.compiled(module, *args, **kwargs)


class CompileProbe:
    """The modules `compile_module` compiled, by name, and whether any of them ran."""

    def __init__(self, owner: str, calls: dict[str, _CompiledCall]) -> None:
        self.owner = owner
        self.calls = calls
        self.checked = False

    def ran(self) -> bool:
        return any(call.ran for call in self.calls.values())

    def describe(self) -> str:
        names = [f"{self.owner}.forward" if name == "" else f"{name} ({self.owner}.{name})" for name in self.calls]
        return ", ".join(names)


def _defines_forward(module: torch.nn.Module) -> bool:
    return type(module).forward is not torch.nn.Module.forward  # nn.Module's own raises "missing forward"


def _targets(module: torch.nn.Module) -> dict[str, torch.nn.Module]:
    """The module itself when it defines `forward`, else its outermost submodules that define
    one and have parameters (containers such as ModuleList are looked into)."""
    if _defines_forward(module):
        return {"": module}
    found: dict[str, torch.nn.Module] = {}
    _collect_outermost("", module, found)  # not a recursive closure: that would be a reference cycle
    return found


def _collect_outermost(prefix: str, parent: torch.nn.Module, found: dict[str, torch.nn.Module]) -> None:
    for name, child in parent.named_children():
        path = f"{prefix}{name}"
        if _defines_forward(child) and any(True for _ in child.parameters()):
            found[path] = child
        elif not _defines_forward(child):
            _collect_outermost(path + ".", child, found)


def compile_module(module: torch.nn.Module, options: Mapping[str, Any]) -> CompileProbe:
    """Compile `module` (once: a later call returns the first probe); see the module's docstring."""
    probe = _PROBES.get(module)
    if probe is not None:
        return probe
    calls: dict[str, _CompiledCall] = {}
    for name, target in _targets(module).items():
        call = _CompiledCall(target, options)
        target._compiled_call_impl = call  # what nn.Module.compile sets; __call__ then runs it
        calls[name] = call
    probe = CompileProbe(type(module).__name__, calls)
    _PROBES[module] = probe
    if not calls:
        warnings.warn(
            f"Trainer(compile=...): {type(module).__name__} has no forward and no submodule with a forward and "
            "parameters, so nothing was compiled. Expected a forward that training_step calls as self(x), or "
            "submodules (self.net = nn.Sequential(...)) that it calls.",
            stacklevel=3,
        )
        probe.checked = True
    elif "" not in calls:
        log.info("compile: %s has no forward; compiled its submodules %s.", type(module).__name__, ", ".join(calls))
    return probe


class FirstStepCheck:
    """A training-step callable that, after its first call, warns once when no compiled module ran."""

    __slots__ = ("step", "probe")

    def __init__(self, step: Callable[..., Any], probe: CompileProbe) -> None:
        self.step, self.probe = step, probe

    def __call__(self, batch: Any, batch_idx: int) -> Any:
        output = self.step(batch, batch_idx)
        probe = self.probe
        if not probe.checked:
            probe.checked = True
            if not probe.ran():
                warnings.warn(
                    f"Trainer(compile=...) compiled {probe.describe()}, but the first training step did not call "
                    "it: training_step calls submodules directly (such as self.net(x)), so the run is not "
                    f"compiled at all. Expected training_step to call self(x), or compile what it calls yourself "
                    "(self.net.compile() in setup()).",
                    stacklevel=2,
                )
        return output
