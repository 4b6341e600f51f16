"""Checkpoint writes off the training path: `Trainer(async_checkpointing=True)`.

A save inside `fit` then blocks training only while the state is collected and copied:
`stage` copies every tensor into buffers of its own in CPU memory (pinned when the tensor is
on a GPU, so the copy runs at full bandwidth and overlaps nothing the model does later), then
a background thread writes that copy with the same atomic steps as a synchronous save
(temporary file, fsync, rename, fsync of the folder). Training goes on meanwhile.

- The next save waits for the previous write first, so writes never overlap and files
  appear in the order they were requested; the staging buffers are reused from save to save
  (same sizes: no new allocation, no page faults), and freed when fit ends.
- A GPU tensor's buffer is page-locked at its exact size (`cudaHostRegister` on an ordinary
  allocation), not taken from torch's pinned-memory cache, which rounds every block up to a
  power of two and keeps it for the life of the process: page-locked memory is held only
  while fit runs, and never more than the checkpoint's own size.
- A write that fails raises its error at the next save or when `fit` ends; `fit` returns
  only after the last write is complete.
- A crash or kill during a background write leaves the previous complete file, as any save
  does (the new one was going to a temporary name).
- The copy keeps which tensors share memory, so the file is byte for byte the file a
  synchronous save of the same state writes (on a GPU, the tensors are recorded as CPU ones).

Example:
    >>> import torch
    >>> weights = torch.arange(4.0)
    >>> copy = stage({"w": weights, "view": weights[1:3]})
    >>> weights.zero_(); copy["view"]
    tensor([0., 0., 0., 0.])
    tensor([1., 2.])
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["BackgroundWrites", "StagingPool", "stage"]

log = logging.getLogger("trainer")


def _host_register(pointer: int, nbytes: int) -> bool:
    """Page-lock `nbytes` of ordinary host memory at `pointer` for CUDA (False: not possible here)."""
    try:
        return int(torch.cuda.cudart().cudaHostRegister(pointer, nbytes, 0)) == 0
    except Exception:  # noqa: BLE001 - no CUDA runtime: the buffer stays pageable (slower copies, same bytes)
        return False


def _host_unregister(pointer: int) -> None:
    try:
        torch.cuda.cudart().cudaHostUnregister(pointer)
    except Exception:  # noqa: BLE001 - best effort: the memory is freed either way
        pass


def _unregister_all(registered: list[torch.Tensor]) -> None:
    """Unlock every buffer in `registered` and forget them (their memory is freed with the last reference)."""
    for buffer in registered:
        _host_unregister(buffer.data_ptr())
    registered.clear()


class StagingPool:
    """CPU buffers of the previous save, handed out again by size; page-locked ones for GPU
    tensors (registered at their exact size, see the module). `clear` unlocks and drops them
    all; a pool dropped without `clear` unlocks its buffers when it is collected."""

    def __init__(self) -> None:
        self._free: dict[tuple[int, bool], list[torch.UntypedStorage]] = {}
        self._lent: list[tuple[tuple[int, bool], torch.UntypedStorage]] = []
        self._registered: list[torch.Tensor] = []  # page-locked buffers, unlocked by clear()
        finalizer = weakref.finalize(self, _unregister_all, self._registered)
        finalizer.atexit = False  # at interpreter exit the process's memory goes anyway

    def take(self, nbytes: int, pinned: bool) -> torch.UntypedStorage:
        key = (nbytes, pinned)
        free = self._free.get(key)
        buffer = free.pop() if free else self._allocate(nbytes, pinned)
        self._lent.append((key, buffer))
        return buffer

    def _allocate(self, nbytes: int, pinned: bool) -> torch.UntypedStorage:
        memory = torch.empty(nbytes, dtype=torch.uint8)
        if pinned and nbytes > 0:
            if _host_register(memory.data_ptr(), nbytes):
                self._registered.append(memory)
            else:
                log.debug("Async checkpoint: %d bytes of staging memory could not be page-locked; copying to pageable memory.",
                          nbytes)
        return memory.untyped_storage()

    @property
    def page_locked_bytes(self) -> int:
        """Bytes of page-locked memory the pool holds now."""
        return sum(buffer.numel() for buffer in self._registered)

    def give_back(self) -> None:
        """The write that used the lent buffers is over: they can be filled again."""
        for key, buffer in self._lent:
            self._free.setdefault(key, []).append(buffer)
        self._lent = []

    def clear(self) -> None:
        """Fit ended: unlock and drop every buffer (a staged copy still referenced stays valid, pageable)."""
        _unregister_all(self._registered)
        self._free, self._lent = {}, []


def stage(state: Any, pool: StagingPool | None = None) -> Any:
    """`state` with every tensor copied into CPU memory of its own; containers rebuilt, other
    leaves (numbers, strings) shared. Tensors that share a storage still share one in the copy."""
    pool = pool if pool is not None else StagingPool()  # kept until the copies are complete (it unlocks when dropped)
    copies: dict[int, torch.UntypedStorage] = {}
    tensors: dict[int, torch.Tensor] = {}  # one tensor object twice (tied weights) stays one object
    on_gpu: set[torch.device] = set()

    def copy(tensor: torch.Tensor) -> torch.Tensor:
        if id(tensor) not in tensors:
            tensors[id(tensor)] = copy_tensor(tensor)
        return tensors[id(tensor)]

    def copy_tensor(tensor: torch.Tensor) -> torch.Tensor:
        if tensor.layout != torch.strided or tensor.is_quantized or type(tensor) not in (torch.Tensor, torch.nn.Parameter):
            return tensor.detach().to("cpu", copy=True)  # rare kinds: a plain copy
        storage = tensor.untyped_storage()
        buffer = copies.get(storage._cdata)
        if buffer is None:
            pinned = storage.device.type == "cuda"
            if pinned:
                on_gpu.add(storage.device)
            buffer = pool.take(storage.nbytes(), pinned)
            source = torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage)  # the bytes, flat
            torch.empty(0, dtype=torch.uint8).set_(buffer).copy_(source, non_blocking=pinned)
            copies[storage._cdata] = buffer
        out = torch.empty(0, dtype=tensor.dtype).set_(buffer, tensor.storage_offset(), tensor.size(), tensor.stride())
        return torch.nn.Parameter(out, requires_grad=tensor.requires_grad) if isinstance(tensor, torch.nn.Parameter) else out

    def walk(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return copy(value)
        if isinstance(value, dict):
            return type(value)((key, walk(item)) for key, item in value.items())
        if isinstance(value, list):
            return [walk(item) for item in value]
        if isinstance(value, tuple):
            return tuple(walk(item) for item in value)
        return value

    staged = walk(state)
    for device in on_gpu:
        torch.cuda.synchronize(device)  # the copies are complete before the writer reads them
    return staged


class BackgroundWrites:
    """One write at a time in a background thread; its error kept for `wait`."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._after: list[Callable[[], None]] = []
        self.pool = StagingPool()

    @property
    def busy(self) -> bool:
        return self._thread is not None

    def submit(self, job: Callable[[], None], name: str) -> None:
        """Run `job` (it writes staged data) in the background; call `wait` first."""
        if self._thread is not None:
            raise RuntimeError("BackgroundWrites.submit: the previous write was not waited for.")

        def run() -> None:
            try:
                job()
            except BaseException as error:  # noqa: BLE001 - kept for wait(), raised on the training thread
                self._error = error

        # Not a daemon: a process that ends while a write is in flight finishes it first.
        self._thread = threading.Thread(target=run, name=f"checkpoint-writer {name}", daemon=False)
        self._thread.start()

    def after_write(self, action: Callable[[], None]) -> None:
        """Run `action` once the write in flight is complete (now if there is none); dropped
        if that write fails (say, deleting the file the new one replaces)."""
        if self._thread is None:
            action()
        else:
            self._after.append(action)

    def wait(self) -> BaseException | None:
        """Wait for the write in flight; return its error (None: complete, or nothing was in flight)."""
        if self._thread is not None:
            self._thread.join()  # interrupted (Ctrl-C): still in flight, waited for again later
            self._thread = None
        error, self._error = self._error, None
        actions, self._after = self._after, []
        self.pool.give_back()
        if error is None:
            for action in actions:
                action()
        return error
