"""`Checkpoints`: a run's checkpoint files, written, chosen, read and restored.

The run's context (`trainer/loops/context.py`) owns one, as `context.checkpoints`, beside the
run's output (`context.output`, `trainer/logging/output.py`), which owns the run's folder and
loggers. The two meet at the folder: last.ckpt is written in the run's folder, and a resume
continues the folder and the logger runs of the checkpoint it reads (`ckpt_path="last"` picks
that checkpoint: `latest.py`). They reach each other only through the context, so neither
folder imports the other.

- `save`/`save_last`: the whole state (`state.py`), or the weights alone, written atomically
  by rank 0 (every rank for FSDP's sharded folders), in the background inside fit with
  `async_checkpointing` (`writer.py`);
- `read_checkpoint`: `ckpt_path` ('last', 'best' or a path) loaded and checked before anything
  is touched; `restore`/`restore_weights` then apply it;
- `start_run`: before fit writes anything, the run folder's last.ckpt is checked to be of the
  kind this run writes, and a named run that starts over is warned about (`folder_checks.py`).

What it reads of the run is typed in `host.py` (`CheckpointHost`, `RunFolder`).

A checkpoint location may be a URL (`s3://...`, `storage.py`); with `root_dir` a URL, the run's
checkpoints live in the bucket (`checkpoint_dir`) while its logs stay local (`output.run_dir`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trainer._utils import WeakAttribute
from trainer.checkpoint.folder_checks import other_kind_in, warn_if_restarting
from trainer.checkpoint.format import CheckpointError, check_layout, load_checkpoint
from trainer.checkpoint.host import CheckpointHost, RunFolder
from trainer.checkpoint.latest import agree_on_last, facts_of_run, note, run_folder_of
from trainer.checkpoint.sharded import is_sharded, read_sharded
from trainer.checkpoint.sharded_remote import attach_shards
from trainer.checkpoint.bucket_runs import checkpoint_folder, log_folder
from trainer.checkpoint.storage import Location, RemotePath, check_reachable, identity, is_remote, location
from trainer.checkpoint.state import collect_state, collect_weights, restore_module, restore_state
from trainer.checkpoint.trackers import continue_loggers
from trainer.checkpoint.writer import CheckpointWriter

__all__ = ["Checkpoints", "CheckpointHost", "RunFolder", "other_kind_in", "warn_if_restarting"]

log = logging.getLogger("trainer")


class Checkpoints:
    context: WeakAttribute[CheckpointHost] = WeakAttribute()  # the run's context owns this object: no reference cycle

    def __init__(self, context: CheckpointHost) -> None:
        self.context = context
        self._files = CheckpointWriter()  # sync or background writes, last.ckpt retention
        self.saves = 0  # checkpoints this process wrote (on rank 0)
        self.resumed_at: int | None = None  # the step a resumed fit started at (values there may be written already)
        self._adopted: dict[str, Any] | None = None  # the checkpoint whose logger runs were taken when it was read
        self._resumed_inside_epoch: dict[str, Any] | None = None  # until that epoch's start hooks ran
        self._resumed_streams: dict[str, Any] | None = None  # a resume at an epoch's start: its random streams, until on_train_start ran
        # Whole checkpoints of this fit (written, or resumed from), oldest first, on every rank
        # alike: what nonfinite_loss="rollback" can go back to (trainer/loops/guard.py).
        self.rollback_targets: list[Location] = []
        self.beside_last: list[Callable[[Path], None]] = []  # rank 0, after each last.ckpt: e.g. the compile cache
        self.resumed_from: str | None = None  # the checkpoint this fit resumed from: never removed by retention

    @property
    def writes(self) -> bool:
        return self.context.strategy.is_global_zero

    @property
    def _options(self) -> dict[str, Any] | None:
        return self.context.args.storage_options

    def location(self, path: str | Path | RemotePath) -> Location:
        """A checkpoint path as given (a URL gets the Trainer's `storage_options`)."""
        return location(path, self._options)

    def folder_of(self, run_dir: Path) -> Location:
        """Where the run whose folder is `run_dir` keeps its checkpoints (in the bucket when root_dir is a URL)."""
        return checkpoint_folder(run_dir, self.context.args.root_dir, self._options)

    @property
    def checkpoint_dir(self) -> Location:
        return self.folder_of(self.context.output.run_dir)

    @property
    def last_path(self) -> Location:
        return self.checkpoint_dir / "last.ckpt"

    def check_location(self, path: str | Path | RemotePath) -> None:
        """Before any step: a URL's bucket exists and the credentials may use it (a clear error names
        the path and what to check). Nothing for a local path."""
        where = self.location(path)
        if not isinstance(where, RemotePath):
            return
        check_reachable(where)  # every rank: all of them stop here together, none is left waiting

    # ------------------------------------------------------------------- a run's ends
    def start_run(self) -> None:
        """Before fit writes anything in the run's folder (config.yaml included)."""
        context = self.context
        if context.args.enable_checkpointing:
            if is_remote(context.args.root_dir):
                self.check_location(context.args.root_dir)
            self._check_last_kind()
        if self.writes and self.saves == 0 and context.state.global_step == 0 and self.resumed_at is None \
                and context.output.planned_dir() is not None:  # (a resume of a step-0 checkpoint is no restart)
            warn_if_restarting(self.checkpoint_dir)  # a named run's folder, and a fit from the beginning

    def _check_last_kind(self) -> None:
        """Before training, on every rank: the run folder's last.ckpt, if any, is of the kind this
        run writes (a file, or FSDP's sharded folder), so no save replaces one with the other."""
        strategy, output, problem = self.context.strategy, self.context.output, None
        folder = output.chosen_dir or output.continued_dir or (output.planned_dir() if self.writes else None)
        if self.writes and folder is not None:
            problem = other_kind_in(self.folder_of(Path(folder)), strategy.sharded_checkpoints)
        if strategy.world_size > 1:
            problem = strategy.broadcast_object(problem)
        if problem is not None:
            raise CheckpointError(problem)

    def finish_writes(self) -> None:
        """Fit is ending normally: the last background write is complete, or its error is raised."""
        self._files.settle(self.context.strategy, enabled=self.context.args.async_checkpointing)

    def end_run(self) -> None:
        """Fit ended (also after an error): a background write in flight completes (after an error: logged)."""
        self._files.close()

    # ------------------------------------------------------------------------ writing
    def save(self, path: str | Path | RemotePath, *, allow_partial: bool = False, weights_only: bool = False,
             keep: int | None = None) -> Location:
        """Write a checkpoint; refuse (RuntimeError) inside a window unless `allow_partial`.
        Inside fit with `async_checkpointing`, a single file is written in the background
        (trainer/checkpoint/background.py); `keep`: the retention of the run's last.ckpt."""
        target = self.location(path)
        context = self.context
        if not weights_only:
            context.output.flush()  # what was logged up to this step is on disk before the checkpoint that resumes after it
        args, strategy = context.args, context.strategy
        self._files.settle(strategy, enabled=args.async_checkpointing)  # the previous background write
        if weights_only:
            state = collect_weights(context, target)
        else:
            state = collect_state(context, allow_partial=allow_partial, target=target)
        self._files.write(state, target, strategy, background=context.output.in_fit and args.async_checkpointing,
                          keep=keep, shards=context if strategy.sharded_checkpoints else None)  # FSDP: every rank writes
        self.saves += int(self.writes)
        if not weights_only and context.output.in_fit:
            self._note_target(target)
        return target

    def _note_target(self, path: Location) -> None:
        self.rollback_targets = [target for target in self.rollback_targets if str(target) != str(path)] + [path]

    def read_newest_for_rollback(self) -> dict[str, Any] | None:
        """The newest whole checkpoint of this fit that still reads (every rank alike), or None."""
        self._files.settle(self.context.strategy, enabled=self.context.args.async_checkpointing)
        for path in reversed(list(self.rollback_targets)):
            try:
                state = self._read_on_every_rank(path)
                check_layout(state, weights_only=False)
                return state
            except (CheckpointError, OSError) as error:
                note(logging.WARNING, "Cannot roll back to %s (%s); trying an older checkpoint.", path, error)
                self.rollback_targets.remove(path)
        return None

    def save_last(self) -> None:
        """last.ckpt; on an interrupt inside a window it is written and marked as not exact."""
        if self.context.args.enable_checkpointing and self.context.module is not None:
            self.save(self.last_path, allow_partial=True, keep=self.context.args.keep_last_checkpoints)
            last = self.last_path
            if self.writes and isinstance(last, Path):  # a sidecar such as the compile cache: not in a bucket
                for write_beside in self.beside_last:
                    write_beside(last.parent)

    def remove_checkpoint(self, path: str | Path | RemotePath) -> None:
        """Rank 0: delete a checkpoint, once the write in flight (if any) is complete; never the
        one this fit resumed from (a top-k or keep-last rule would otherwise lose the only copy)."""
        if str(path) in map(str, self.rollback_targets):
            self.rollback_targets = [target for target in self.rollback_targets if str(target) != str(path)]
        if not self.writes:
            return
        if self.resumed_from is not None and identity(self.location(path)) == identity(self.location(self.resumed_from)):
            log.info("Kept %s although it left the kept checkpoints: this run resumed from it.", path)
            return
        self._files.remove(self.location(path))

    # ------------------------------------------------------------------------ reading
    def read_checkpoint(self, ckpt_path: str | Path, *, weights_only: bool = False, module: Any = None) -> dict[str, Any] | None:
        """Load and check `ckpt_path` ('last', 'best' or a path) before anything is touched.
        None: ckpt_path='last' for fit and the run has no checkpoint yet (it starts fresh).
        `module`: the module to run, for 'last' to find a run of the same experiment."""
        output = self.context.output
        if not weights_only and not self.saves:
            output.release_unused_folder()  # a folder made by reading trainer.log_dir first, still empty
        if str(ckpt_path) == "last":
            state = self._read_last(weights_only, facts_of_run(self.context, module, weights_only))
        else:
            if is_remote(ckpt_path) and not weights_only:
                self.check_location(ckpt_path)
            state = self._read_on_every_rank(ckpt_path)
            check_layout(state, weights_only=weights_only)
            if not weights_only and str(ckpt_path) != "best" and self.writes and output.planned_dir() is None:
                output.continued_dir = output.continued_dir or self._run_folder_holding(ckpt_path)
        if state is not None and not weights_only:
            self._adopt_run(state)
            self.resumed_from = state.get("_path")
            self._files.protect = (self.resumed_from,) if self.resumed_from else ()
        return state

    def _run_folder_holding(self, ckpt_path: str | Path) -> Path | None:
        """The run folder under root_dir a checkpoint file belongs to (its last.ckpt, or a file in its
        checkpoints/), which a resume from it continues, as ckpt_path='last' does; else None."""
        root_dir = self.context.args.root_dir
        if is_remote(ckpt_path) and is_remote(root_dir):  # a checkpoint of a run in root_dir's bucket
            remote_root, run = self.location(root_dir), run_folder_of(self.location(ckpt_path), self.location(root_dir))
            within = isinstance(run, RemotePath) and run != remote_root and run.is_relative_to(remote_root)
            return log_folder(run, root_dir) if within else None
        if "://" in str(ckpt_path) or is_remote(root_dir):
            return None
        root = Path(root_dir)
        folder = run_folder_of(ckpt_path, root)
        assert isinstance(folder, Path)
        inside, base = folder.absolute().resolve(), root.absolute().resolve()
        return folder if inside != base and inside.is_relative_to(base) else None

    def _adopt_run(self, checkpoint: dict[str, Any]) -> None:
        """A resume: the loggers take the checkpoint's runs now, before any user code (a `setup`
        hook reading `trainer.log_dir`) can make a new folder; the restore then finds them taken."""
        if not self.writes or self.context.args.logger is False:
            return
        loop = checkpoint.get("loop")
        step = loop.get("global_step") if isinstance(loop, dict) else None
        if isinstance(step, int):
            continue_loggers(self.context.output.loggers, checkpoint.get("loggers"), step)
            self._adopted = checkpoint

    def _read_last(self, evaluating: bool, facts: dict[str, Any] | None = None) -> dict[str, Any] | None:
        """The newest complete checkpoint of this run (trainer/checkpoint/latest.py): a run of the
        same experiment (`facts`); an unnamed run continues in the folder of the run it resumes."""
        output = self.context.output
        args = self.context.args
        planned_run = output.planned_dir() if self.writes else None
        root: Any = location(args.root_dir, self._options) if is_remote(args.root_dir) else args.root_dir
        planned = self.folder_of(planned_run) if planned_run is not None else None
        if isinstance(root, RemotePath) and not evaluating:
            self.check_location(root)
        state, folder = agree_on_last(self.context.strategy, root, planned, self._read, facts, evaluating)
        if state is None and evaluating:
            raise CheckpointError(
                f"ckpt_path='last': {f'run {str(planned)!r}' if planned else f'root_dir {str(root)!r}'} has no "
                "complete checkpoint to evaluate. Expected a previous fit with enable_checkpointing=True there, "
                "or pass the checkpoint's path."
            )
        if state is not None and planned is None and folder is not None:
            output.continued_dir = log_folder(folder, args.root_dir)  # whatever the logger: the Trainer's own files continue there
        return state

    def _read_on_every_rank(self, ckpt_path: str | Path | RemotePath) -> dict[str, Any]:
        """A path (or 'best') read by every rank. With several processes, the file's checksum (a
        full read of it) is checked by each machine's first process only (its local rank 0; every
        process when that is not known), the others reading only what they use; then every rank
        agrees the read worked, so a damaged file fails every rank, none left waiting."""
        strategy = self.context.strategy
        if strategy.world_size == 1:
            return self._read(ckpt_path)
        local_rank = getattr(strategy, "local_rank", None)
        state: dict[str, Any] | None = None
        failure: Exception | None = None
        try:
            state = self._read(ckpt_path, verify=local_rank is None or local_rank == 0)
        except Exception as error:  # noqa: BLE001 - raised below, after the other ranks know
            failure = error
        read_everywhere = strategy.all_agree(failure is None)
        if failure is not None:
            raise failure
        if not read_everywhere or state is None:
            raise CheckpointError(
                f"Checkpoint {str(ckpt_path)!r} could not be read on another rank (see that rank's error: a damaged "
                "file, or a path that does not exist on every machine). Expected the same intact file at that path "
                "on every machine: a shared file system, or a copy of the file on each."
            )
        return state

    def _read(self, ckpt_path: str | Path | RemotePath, verify: bool = True) -> dict[str, Any]:
        """`verify=False`: skip the file's checksum (another rank has just checked it)."""
        if str(ckpt_path) == "best":
            ckpt_path = self._best_path()
        if not isinstance(ckpt_path, RemotePath) and not is_remote(ckpt_path) and is_sharded(ckpt_path):
            return read_sharded(ckpt_path)
        where = self.location(ckpt_path)
        state = load_checkpoint(where, verify=verify)
        return attach_shards(state, where) if isinstance(where, RemotePath) else state  # FSDP's, in a bucket

    def default_best_path(self) -> str:
        """The file Lightning's default checkpoint callback would call best: the `last.ckpt` this
        Trainer wrote at its newest epoch end, or "" when it wrote none."""
        if self.saves and self.context.output.chosen_dir is not None and self.last_path.is_file():
            return str(self.last_path)
        return ""

    def _best_path(self) -> Location:
        """ckpt_path="best": the best file of the Trainer's ModelCheckpoint (Lightning's rule)."""
        for callback in self.context.callbacks:
            best = getattr(callback, "best_model_path", None)
            if best:
                return self.location(best)
        has_callback = any(hasattr(callback, "best_model_path") for callback in self.context.callbacks)
        if not has_callback and self.default_best_path():
            # Lightning's default checkpoint callback (monitor=None) calls the newest epoch-end file
            # "best": here that is the last.ckpt this Trainer writes at every epoch end.
            log.info("ckpt_path='best' without a ModelCheckpoint: using this run's %s (the newest, as Lightning's "
                     "default checkpoint does).", self.last_path)
            return self.last_path
        raise CheckpointError(
            "ckpt_path='best': no ModelCheckpoint of this Trainer has saved a best checkpoint yet, and this Trainer "
            "wrote no last.ckpt (enable_checkpointing=False, or no fit yet). Expected "
            "callbacks=[ModelCheckpoint(monitor=...)] and a fit that saved one, or pass 'last' or a path."
        )

    # ---------------------------------------------------------------------- restoring
    def restore(self, checkpoint: dict[str, Any]) -> None:
        adopted, self._adopted = self._adopted is checkpoint, None
        # The loggers took the checkpoint's runs when it was read (`_adopt_run`): not twice.
        restore_state(self.context, {k: v for k, v in checkpoint.items() if k != "loggers"} if adopted else checkpoint)
        state = self.context.state
        self.resumed_at = state.global_step
        if checkpoint.get("_path"):
            self._note_target(self.location(checkpoint["_path"]))
        self._resumed_inside_epoch = checkpoint if state.batches_done > 0 else None
        ours = "lightning" not in (checkpoint.get("origin") or {})  # a Lightning file keeps this process's streams
        self._resumed_streams = ({key: checkpoint[key] for key in ("rng", "_path") if key in checkpoint}
                                 if state.batches_done == 0 and ours else None)
        if self.writes:  # once, from rank 0; seen in a plain script's output too (a requeued job's log says it)
            note(
                logging.INFO, "Resumed from %s: epoch %d, optimizer step %d, batch %d of the epoch.",
                checkpoint.get("_path", "the checkpoint"), state.epoch, state.global_step, state.batches_done,
            )

    def take_resumed_checkpoint(self) -> dict[str, Any] | None:
        """The checkpoint of a resume inside an epoch, once (then it is let go): the loop
        applies it again after that epoch's start hooks (`trainer/loops/resume.py`)."""
        checkpoint, self._resumed_inside_epoch = self._resumed_inside_epoch, None
        return checkpoint

    def take_resumed_streams(self) -> dict[str, Any] | None:
        """The random streams of a resume at an epoch's start, once: the loop applies them again
        after `on_train_start`, so draws made by the hooks before training (a callback building
        its own model in `on_fit_start`) don't shift them (`trainer/loops/resume.py`)."""
        streams, self._resumed_streams = self._resumed_streams, None
        return streams

    def forget_resume(self) -> None:
        """Fit ended: a checkpoint kept for `take_resumed_checkpoint` is no longer needed."""
        self._resumed_inside_epoch = self._resumed_streams = None
        self._adopted, self.resumed_at = None, None
        self.rollback_targets = []

    def restore_weights(self, checkpoint: dict[str, Any]) -> None:
        path = checkpoint.get("_path")
        source = f"Checkpoint {path!r}" if path else "The checkpoint"
        restore_module(self.context.module, checkpoint, source, self.context.strategy)
