"""The run's folder and loggers, as `RunOutput` opens them: the logger made from `logger=`
(TensorBoard for True, a `LoggerList` for a list), and `run_dir` (the logger's folder, the folder
of the run a resume continues, or a new `version_N`, free in the bucket too when checkpoints go
to a URL: `runs.py`, `trainer/checkpoint/bucket_runs.py`).

`OutputFolder` is a base of `RunOutput`, which sets the attributes it reads in its `__init__`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainer.checkpoint.bucket_runs import log_root, taken_versions
from trainer.checkpoint.storage import is_remote
from trainer.logging.base import lightning_run_dir, lightning_style
from trainer.logging.host import RunHost
from trainer.logging.multi import LoggerList
from trainer.logging.runs import DEFAULT_NAME, make_run_dir, planned_folder, planned_run_dir, release_folder
from trainer.logging.tensorboard import TensorBoardLogger

__all__ = ["OutputFolder"]


class OutputFolder:
    """`RunOutput`'s run folder and loggers (only the global-zero rank has a logger)."""

    context: RunHost
    _run_dir: Path | None
    continued_dir: Path | None
    _logger: Any
    _logger_arg: Any

    @property
    def writes(self) -> bool:
        return self.context.strategy.is_global_zero

    @property
    def logging_on(self) -> bool:
        """Whether the run logs at all: the same answer on every rank (only rank 0 has the
        logger), so work that needs every rank (FSDP's global gradient norm) agrees."""
        return self._logger_arg is not False and self._logger_arg is not None

    @property
    def logger(self) -> Any:
        if self._logger is None and self.writes and self._logger_arg is not False:
            if self._logger_arg is True:
                args = self.context.args
                where: dict[str, Any] = {"version_dir": self.continued_dir} if self.continued_dir else {
                    "version": args.run_name if args.run_name is not None else self._free_version()}
                self._logger = TensorBoardLogger(log_root(args.root_dir), **where)
            elif isinstance(self._logger_arg, list):  # logger=[...]: the same values to each
                self._logger = LoggerList(self._logger_arg)
            else:
                self._logger = self._logger_arg
        return self._logger

    @property
    def loggers(self) -> list[Any]:
        """Every logger this process writes to (`logger=[...]`'s list; [] on ranks other than 0)."""
        logger = self.logger
        return [] if logger is None else list(logger.loggers) if isinstance(logger, LoggerList) else [logger]

    @property
    def run_dir(self) -> Path:
        if self._run_dir is None:
            logger = self.logger
            if logger is not None and getattr(logger, "log_dir", None) is not None:
                self._run_dir = Path(logger.log_dir)
            elif lightning_style(logger):  # a Logger subclass without a folder: Lightning's save_dir/name/version
                self._run_dir = lightning_run_dir(logger, log_root(self.context.args.root_dir))
            else:
                args = self.context.args
                self._run_dir = self.continued_dir or make_run_dir(
                    log_root(args.root_dir), DEFAULT_NAME, args.run_name if args.run_name is not None else self._free_version())
        return self._run_dir

    def _free_version(self) -> int | None:
        """A new unnamed run whose checkpoints go to a bucket (root_dir is a URL): the first
        version_N free both here and there, so it never takes another machine's run folder.
        None otherwise (a local root_dir, or a SLURM job's own folder): the usual choice."""
        args = self.context.args
        root = log_root(args.root_dir)
        if not is_remote(args.root_dir) or planned_run_dir(root, DEFAULT_NAME, None) is not None:
            return None
        local = root / DEFAULT_NAME
        here = [int(p.name[8:]) for p in local.iterdir() if p.name.startswith("version_") and p.name[8:].isdigit()] \
            if local.is_dir() else []
        return max([*here, *taken_versions(args.root_dir, DEFAULT_NAME, args.storage_options)], default=-1) + 1

    @property
    def chosen_dir(self) -> Path | None:
        """The run's folder once chosen (`run_dir` was read); None before, with nothing created."""
        return self._run_dir

    def planned_dir(self) -> Path | None:
        """The run's folder when it is named (run_name, a logger's version, SLURM's job id),
        without creating anything; None when the run would get a new version_N."""
        return planned_folder(self._logger_arg, log_root(self.context.args.root_dir), self.context.args.run_name)

    def release_unused_folder(self) -> None:
        """`trainer.log_dir` read before a resuming fit (a script printing it first) made a new
        version_N: while nothing was written there, it is given back, so the resume continues
        its run's folder as it does without that read."""
        args = self.context.args
        if self._run_dir is not None and self.writes and release_folder(self._run_dir, self.loggers, log_root(args.root_dir),
                                                                         args.run_name):
            self._run_dir = None

    def flush(self) -> None:
        """What was logged so far, on disk (before a checkpoint that resumes after it is written)."""
        if self._logger is not None:
            self._logger.flush()
