"""`Trainer(compile=...)`: the compiler's cache travels with the run, and what compiling cost is said.

- **Saved beside last.ckpt.** Whenever the Trainer writes the run's last.ckpt, rank 0 also
  writes `compile_cache.bin` in the same folder: torch's portable cache artifacts
  (`torch.compiler.save_cache_artifacts()`: the AOTAutograd and Inductor graph caches, on a
  GPU the Triton kernels too), written atomically, with a CRC32 and the torch version. It is
  rewritten only when it changed, and no retention rule touches it.
- **Loaded on resume, before the first compiled step.** A fit resumed from a checkpoint file
  (`ckpt_path="last"` on a requeue, or a path) loads the `compile_cache.bin` of that run's
  folder into the local compiler caches, so a fresh node (an empty `TORCHINDUCTOR_CACHE_DIR`)
  finds its graphs there instead of tracing and lowering them again. On a CPU, Inductor still
  compiles the C++ of its generated kernels on a node that has never built them (the artifacts
  hold the generated source, not the built libraries).
- **Trust.** Unlike a checkpoint, which loads with `weights_only=True` and never runs code,
  these artifacts *are* code: the generated Python and kernels run when a graph is looked up,
  and cache entries are unpickled. They are loaded only when `compile` is on, only from the
  folder of the checkpoint being resumed, only from a file owned by the user running the job
  and writable by nobody else (the rule ssh applies to its keys), and only when its CRC and
  torch version match; anything else is skipped with a note (a compile costs time, never
  correctness). `TORCHINDUCTOR_FORCE_DISABLE_CACHES=1` turns saving and loading off, as it
  turns off torch's own caches.
- **What compiling cost is said when fit ends** (rank 0, INFO): graphs compiled, recompiles
  (with the first reason), graph breaks, seconds spent compiling, cache hits and misses.

Example:
    >>> from trainer.core.compile_cache import read_sidecar
    >>> read_sidecar("missing/compile_cache.bin") is None
    True
"""

from __future__ import annotations

import json
import logging
import os
import stat
import zlib
from pathlib import Path
from typing import Any

import torch

from trainer.checkpoint.latest import note, run_folder_of

__all__ = ["CompileCache", "SIDECAR", "compile_numbers", "read_sidecar", "start_compile_cache", "write_sidecar"]

log = logging.getLogger("trainer")

SIDECAR = "compile_cache.bin"
_MAGIC = b"loopwright compile cache\n"


def _caches_disabled() -> bool:
    from torch._inductor import config

    return bool(config.force_disable_caches) or not config.fx_graph_cache


def write_sidecar(folder: Path, payload: bytes) -> Path:
    """`folder/compile_cache.bin`, atomically (a temporary, fsynced, then renamed), mode 0600."""
    target = folder / SIDECAR
    header = json.dumps({"torch": torch.__version__, "crc32": zlib.crc32(payload), "size": len(payload)}).encode()
    temporary = folder / f".{SIDECAR}.tmp{os.getpid()}"
    try:
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(_MAGIC + header + b"\n" + payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, target)
    finally:
        temporary.unlink(missing_ok=True)
    return target


def read_sidecar(path: str | os.PathLike[str]) -> bytes | None:
    """The artifacts of a sidecar this user wrote for this torch, intact; None (with a note
    saying why, unless there is no file) for anything else."""
    path = Path(path)
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            return None
        if info.st_uid != os.getuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            note(logging.WARNING, "compile cache %s not loaded: it holds code that would run, and it is %s. Expected "
                 "a file of this user's, writable by nobody else (chmod go-w, or delete it to compile again).",
                 path, "another user's" if info.st_uid != os.getuid() else "writable by others")
            return None
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    problem, payload = "", b""
    if not data.startswith(_MAGIC) or b"\n" not in data[len(_MAGIC):]:
        problem = "not a compile cache written by the Trainer"
    else:
        header_line, _, payload = data[len(_MAGIC):].partition(b"\n")
        try:
            header = json.loads(header_line)
        except ValueError:
            header = {}
        if header.get("torch") != torch.__version__:
            log.info("compile cache %s was written by torch %s (this is %s): not loaded.", path, header.get("torch"),
                     torch.__version__)
            return None
        if header.get("size") != len(payload) or header.get("crc32") != zlib.crc32(payload):
            problem = "damaged (its CRC32 or size does not match)"
    if problem:
        note(logging.WARNING, "compile cache %s not loaded: %s. The run compiles again; the next checkpoint "
             "rewrites it.", path, problem)
        return None
    return payload


def compile_numbers() -> dict[str, Any]:
    """The process's compile counters so far (torch's own, cumulative)."""
    from torch._dynamo.utils import compilation_time_metrics, counters, get_compilation_metrics

    times = compilation_time_metrics
    return {
        "seconds": sum(times.get("_compile.compile_inner", [])) + sum(times.get("backward._backward_impl", [])),
        "graphs": counters["stats"]["unique_graphs"],
        "graph_breaks": sum(counters["graph_break"].values()),
        "cache_hits": counters["inductor"]["fxgraph_cache_hit"] + counters["aot_autograd"]["autograd_cache_hit"],
        "cache_misses": counters["inductor"]["fxgraph_cache_miss"] + counters["aot_autograd"]["autograd_cache_miss"],
        "frames": {id(entry): entry for entry in get_compilation_metrics()},
    }


class CompileCache:
    """One fit's compile cache: loaded at its start, saved beside every last.ckpt, reported at its end."""

    def __init__(self, writes: bool) -> None:
        self.writes = writes  # rank 0
        self.before = compile_numbers()
        self.loaded: tuple[Path, int] | None = None  # the sidecar and its size
        self.written: int | None = None  # the CRC32 of what was written last

    def load_for(self, checkpoint_path: Any, root: str | os.PathLike[str]) -> None:
        """The sidecar of the run folder of the checkpoint a fit resumes from, if any."""
        if checkpoint_path is None or "://" in str(checkpoint_path) or _caches_disabled():
            return
        folder = run_folder_of(checkpoint_path, root)
        if not isinstance(folder, Path):  # a bucket's run folder: no compile cache there
            return
        path = folder / SIDECAR
        payload = read_sidecar(path)
        if payload is None:
            return
        try:
            info = torch.compiler.load_cache_artifacts(payload)
        except Exception as error:  # noqa: BLE001 - a cache that can't load costs a compile, not the run
            note(logging.WARNING, "compile cache %s not loaded (%s: %s); the run compiles again.", path,
                 type(error).__name__, error)
            return
        count = sum(len(keys) for keys in info.artifacts.values()) if info is not None else 0
        self.loaded = (path, count)
        if self.writes:
            log.info("compile cache: loaded %d artifact(s) from %s.", count, path)

    def save(self, folder: Path) -> None:
        """Beside a last.ckpt just written (rank 0): the artifacts compiled or found so far."""
        if not self.writes or _caches_disabled():
            return
        try:
            saved = torch.compiler.save_cache_artifacts()
        except Exception as error:  # noqa: BLE001 - the checkpoint is written; the cache is a bonus
            log.warning("compile cache not saved (%s: %s).", type(error).__name__, error)
            return
        if saved is None or zlib.crc32(saved[0]) == self.written:
            return
        try:
            write_sidecar(folder, saved[0])
        except OSError as error:
            log.warning("compile cache not saved in %s (%s).", folder, error)
            return
        self.written = zlib.crc32(saved[0])

    def report(self) -> dict[str, Any]:
        """What compiling cost during this fit; logged at INFO by rank 0."""
        now, before = compile_numbers(), self.before
        new = [entry for key, entry in now["frames"].items() if key not in before["frames"]]
        reasons = [entry.recompile_reason for entry in new if getattr(entry, "recompile_reason", None)]
        numbers = {key: now[key] - before[key] for key in now if key != "frames"}
        numbers["recompiles"] = len(reasons)
        if self.writes and (new or numbers["cache_hits"] or numbers["cache_misses"]):
            loaded = f" (loaded {self.loaded[1]} artifact(s) from {self.loaded[0]})" if self.loaded else ""
            log.info(
                "compile: %d graph(s), %d recompile(s)%s, %d graph break(s), %.1f s compiling; cache: %d hit(s), "
                "%d miss(es)%s.", numbers["graphs"], numbers["recompiles"],
                f" (first: {reasons[0].splitlines()[0]})" if reasons else "", numbers["graph_breaks"],
                numbers["seconds"], numbers["cache_hits"], numbers["cache_misses"], loaded,
            )
        return numbers


def start_compile_cache(args: Any, strategy: Any, checkpoints: Any, checkpoint: dict[str, Any] | None) -> CompileCache | None:
    """A fit with `compile` on: the resumed run's cache loaded (before the first compiled step),
    and saved beside every last.ckpt (`checkpoints.beside_last`). None when compile is off."""
    cache = CompileCache(strategy.is_global_zero) if args.compile else None
    if cache is not None and checkpoint is not None:
        cache.load_for(checkpoint.get("_path"), args.root_dir)
    checkpoints.beside_last = [cache.save] if cache is not None else []
    return cache
