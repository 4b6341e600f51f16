"""`ModuleTools`: Lightning's plain helpers on a `trainer.Module` (printing, freezing, ranks,
gathering, export), kept apart from the hooks (`trainer/module/hooks.py`) and the core
(`trainer/module/__init__.py`). `Module` derives from this class; subclass `Module`, not this.

Example:
    >>> import torch
    >>> from trainer import Module
    >>> class Net(Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.layer = torch.nn.Linear(2, 1)
    ...         self.example_input_array = torch.zeros(1, 2)
    ...     def forward(self, x):
    ...         return self.layer(x)
    >>> net = Net().freeze()
    >>> net.training, any(p.requires_grad for p in net.parameters()), net.dtype, net.global_rank
    (False, False, torch.float32, 0)
"""

from __future__ import annotations

import builtins
import contextlib
import copy
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from trainer.module.hooks import ModuleHooks

__all__ = ["ModuleTools"]


class ModuleTools(ModuleHooks):
    """Lightning's helpers that do not depend on the loop: see each one."""

    #: The keys Lightning's checkpoints use (`checkpoint[Module.CHECKPOINT_HYPER_PARAMS_KEY]`).
    CHECKPOINT_HYPER_PARAMS_KEY = "hyper_parameters"
    CHECKPOINT_HYPER_PARAMS_NAME = "hparams_name"
    CHECKPOINT_HYPER_PARAMS_TYPE = "hparams_type"

    if TYPE_CHECKING:
        hparams: dict[str, Any]
        automatic_optimization: bool

        @property
        def trainer(self) -> Any: ...
        @property
        def device(self) -> torch.device: ...
        def _attached(self) -> Any: ...
        def _running(self) -> Any: ...
        def toggle_optimizer(self, optimizer: Any) -> None: ...
        def untoggle_optimizer(self, optimizer: Any) -> None: ...

    # ---------------------------------------------------------------------- the process
    @property
    def global_rank(self) -> int:
        """This process's rank among all (0 outside a Trainer or in one process)."""
        ref = self._attached()
        return int(ref.global_rank) if ref is not None else 0

    @property
    def local_rank(self) -> int:
        """This process's rank on its machine (0 outside a Trainer or in one process)."""
        ref = self._attached()
        return int(ref.local_rank) if ref is not None else 0

    def print(self, *args: Any, **kwargs: Any) -> None:
        """`print(...)` from rank 0 only (every rank's would repeat it); beside an open progress
        bar, written above it. Outside a Trainer it prints."""
        ref = self._attached()
        if ref is not None and not ref.is_global_zero:
            return
        run = self._running()
        bar = run.progress_bar() if run is not None else None  # the bar fit shows now, if any
        if bar is not None and not kwargs.get("file"):
            try:
                from tqdm.auto import tqdm
            except ImportError:  # pragma: no cover - tqdm ships with the package
                pass
            else:
                sep, end = kwargs.get("sep", " "), kwargs.get("end", "\n")
                tqdm.write(("" if sep is None else sep).join(map(str, args)), end="\n" if end is None else end)
                return
        builtins.print(*args, **kwargs)

    def all_gather(self, data: Any, group: Any = None, sync_grads: bool = False) -> Any:
        """Every rank's `data` (a tensor, a number, or a collection of them), stacked on a new
        first dimension of size world_size; in one process `data` as tensors, unstacked
        (Lightning's single-device behaviour). `sync_grads=True` lets gradients flow back."""
        data = _to_tensors(data, self.device)
        distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
        if not distributed or torch.distributed.get_world_size(group) == 1:
            return data
        return _apply(data, lambda tensor: _gather(tensor, group, sync_grads))

    # ---------------------------------------------------------------------- the weights
    @property
    def dtype(self) -> torch.dtype:
        """The floating dtype of the module's parameters (the default dtype when it has none)."""
        chosen = self.__dict__.get("_dtype_set")
        if chosen is not None:
            return chosen  # type: ignore[no-any-return]
        for tensor in self.parameters():
            if tensor.is_floating_point():
                return tensor.dtype
        for buffer in self.buffers():
            if buffer.is_floating_point():
                return buffer.dtype
        return torch.get_default_dtype()

    @dtype.setter
    def dtype(self, value: torch.dtype) -> None:
        object.__setattr__(self, "_dtype_set", value)

    def freeze(self) -> Any:
        """No parameter requires grad, and eval mode; returns the module."""
        for param in self.parameters():
            param.requires_grad = False
        return self.eval()

    def unfreeze(self) -> Any:
        """Every parameter requires grad, and train mode; returns the module."""
        for param in self.parameters():
            param.requires_grad = True
        return self.train()

    @contextlib.contextmanager
    def toggled_optimizer(self, optimizer: Any) -> Iterator[None]:
        """`toggle_optimizer(optimizer)` inside the block, `untoggle_optimizer` after (also on error)."""
        self.toggle_optimizer(optimizer)
        try:
            yield
        finally:
            self.untoggle_optimizer(optimizer)

    @property
    def example_input_array(self) -> Any:
        """An example input (a tensor, tuple or dict) for summaries and `to_torchscript(method="trace")`."""
        return self.__dict__.get("_example_input_array")

    @example_input_array.setter
    def example_input_array(self, example: Any) -> None:
        object.__setattr__(self, "_example_input_array", example)

    @property
    def hparams_initial(self) -> dict[str, Any]:
        """A copy of the hyperparameters as they were captured at construction."""
        initial = self.__dict__.get("_hparams_initial")
        if initial is None:  # captured automatically: fixed at the first read (save_hyperparameters fixes it there)
            initial = _copied(dict(self.hparams))
            object.__setattr__(self, "_hparams_initial", initial)
        from trainer._hparams import AttributeDict

        return AttributeDict(_copied(initial))

    @property
    def strict_loading(self) -> bool:
        """Whether `load_from_checkpoint` and resuming require every key to match (default True)."""
        return self.__dict__.get("_strict_loading") in (None, True)

    @strict_loading.setter
    def strict_loading(self, strict: bool) -> None:
        object.__setattr__(self, "_strict_loading", strict)

    # ---------------------------------------------------------------------- export
    def to_torchscript(
        self, file_path: str | Path | None = None, method: str | None = "script", example_inputs: Any = None, **kwargs: Any
    ) -> Any:
        """The module as TorchScript (`torch.jit.script`, or `torch.jit.trace` on `example_inputs` or
        `example_input_array` with `method="trace"`), saved to `file_path` when given. The module's
        train/eval mode is kept."""
        mode = self.training
        object.__setattr__(self, "_jit_is_scripting", True)  # `self.trainer` reads as None meanwhile
        try:
            if method == "script":
                scripted = torch.jit.script(self.eval(), **kwargs)
            elif method == "trace":
                example = example_inputs if example_inputs is not None else self.example_input_array
                if example is None:
                    raise ValueError(
                        "to_torchscript(method='trace') expected example_inputs= or self.example_input_array."
                    )
                from trainer._utils import move_to_device

                scripted = torch.jit.trace(self.eval(), example_inputs=move_to_device(example, self.device), **kwargs)
            else:
                raise ValueError(f"to_torchscript(method=...) expected 'script' or 'trace'. Received: {method!r}.")
        finally:
            object.__setattr__(self, "_jit_is_scripting", False)
            self.train(mode)
        if file_path is not None:
            torch.jit.save(scripted, str(file_path))
        return scripted

    def to_onnx(self, file_path: str | Path, input_sample: Any = None, **kwargs: Any) -> Any:
        """Export to ONNX with `torch.onnx.export` (needs `pip install onnx`), on `input_sample` or
        `example_input_array`; the module's train/eval mode is kept."""
        try:
            import onnx  # noqa: F401
        except ImportError as error:
            raise ModuleNotFoundError(
                "to_onnx needs the onnx package, which is not installed. Expected `pip install onnx` first."
            ) from error
        sample = input_sample if input_sample is not None else self.example_input_array
        if sample is None:
            raise ValueError("to_onnx expected input_sample= or self.example_input_array.")
        from trainer._utils import move_to_device

        sample = move_to_device(sample, self.device)
        mode = self.training
        try:
            return torch.onnx.export(self.eval(), sample if isinstance(sample, tuple) else (sample,), str(file_path), **kwargs)
        finally:
            self.train(mode)


def _copied(values: dict[str, Any]) -> dict[str, Any]:
    try:
        return copy.deepcopy(values)
    except Exception:  # noqa: BLE001 - a value that can't be deep-copied is kept as is
        return dict(values)


def _to_tensors(data: Any, device: torch.device) -> Any:
    if isinstance(data, torch.Tensor):
        return data.to(device)
    if isinstance(data, (bool, int, float)):
        return torch.tensor(data, device=device)
    if isinstance(data, Mapping):
        return type(data)({k: _to_tensors(v, device) for k, v in data.items()})  # type: ignore[call-arg]
    if isinstance(data, (list, tuple)):
        return type(data)(_to_tensors(v, device) for v in data)
    return data


def _apply(data: Any, fn: Any) -> Any:
    if isinstance(data, torch.Tensor):
        return fn(data)
    if isinstance(data, Mapping):
        return type(data)({k: _apply(v, fn) for k, v in data.items()})  # type: ignore[call-arg]
    if isinstance(data, (list, tuple)):
        return type(data)(_apply(v, fn) for v in data)
    return data


def _gather(tensor: torch.Tensor, group: Any, sync_grads: bool) -> torch.Tensor:
    """One tensor from every rank, stacked (equal shapes on every rank)."""
    tensor = tensor.contiguous()
    if sync_grads:
        import torch.distributed.nn.functional as dist_fn

        return torch.stack(dist_fn.all_gather(tensor, group=group or torch.distributed.group.WORLD))
    with torch.no_grad():
        parts = [torch.empty_like(tensor) for _ in range(torch.distributed.get_world_size(group))]
        torch.distributed.all_gather(parts, tensor, group=group)
    return torch.stack(parts)
