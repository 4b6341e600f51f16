"""The Trainer's arguments as one pydantic model: names, defaults and rules in one place.

`Trainer.__init__` validates through `TrainerArgs`, and the YAML config's `trainer:`
section is the same model, so the constructor and the config can't drift apart (a test
compares this model with `Trainer`'s signature).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import pydantic
from pydantic import BaseModel, ConfigDict, Field

__all__ = ["TrainerArgs", "validate_trainer_args", "fast_dev_run_args"]


class TrainerArgs(BaseModel):
    """Every keyword argument of `Trainer`, with its default and its accepted values."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True, validate_default=False)

    precision: Any = Field("fp32", description='"fp32", "amp", "bf16" or a Precision instance')
    max_epochs: int | None = Field(None, ge=1, description="stop after this many epochs")
    max_steps: int | None = Field(None, ge=1, description="stop after this many optimizer steps")
    accumulate_grad_batches: int = Field(1, ge=1, description="micro-batches per optimizer step")
    gradient_clip_val: float | None = Field(None, ge=0, description="clip threshold; None or 0: no clipping")
    gradient_clip_algorithm: Literal["norm", "value"] = "norm"
    root_dir: Path = Field(Path("runs"), description="where runs write logs and checkpoints")
    logger: Any = Field(True, description="True, False or a logger instance")
    enable_progress_bar: bool = True
    enable_checkpointing: bool = True
    log_every_n_steps: int = Field(50, ge=1)
    callbacks: list[Any] | None = None
    seed: int | None = Field(None, ge=0, le=2**32 - 1, description="seeds Python, NumPy and torch when fit starts")
    device: str = Field("auto", description='"auto", "cpu", "cuda", "cuda:N", "mps"')
    strategy: Any = Field("auto", description='"auto", "ddp", "fsdp", "single" or a Strategy instance such as trainer.distributed.DDP(...) or FSDP(...)')
    devices: int = Field(1, ge=1, description="processes on this machine: N > 1 outside torchrun starts N-1 more running the same script")
    nonfinite_loss: Literal["error", "skip", "off"] = Field(
        "error", description="fp32/bf16: what a non-finite loss does (amp skips such steps); 'off': no guard"
    )
    val_check_interval: Annotated[int, Field(ge=1)] | Annotated[float, Field(gt=0, le=1)] | None = Field(
        None, description="validate every n training batches (int) or fraction of an epoch (float); None: epoch end"
    )
    check_val_every_n_epoch: int | None = Field(1, ge=1, description="validate in every n-th epoch; None: count val_check_interval over the run")
    num_sanity_val_steps: int = Field(2, ge=-1, description="validation batches run before training (-1: all)")
    isolate_validation_rng: bool = Field(
        False,
        description="True: validation inside fit restores every random stream afterwards, so validating never "
        "changes training (not a hand-written loop's weights); False: it draws from them as such a loop does",
    )
    limit_train_batches: Annotated[int, Field(ge=0)] | Annotated[float, Field(ge=0, le=1)] | None = None
    limit_val_batches: Annotated[int, Field(ge=0)] | Annotated[float, Field(ge=0, le=1)] | None = None
    limit_test_batches: Annotated[int, Field(ge=0)] | Annotated[float, Field(ge=0, le=1)] | None = None
    limit_predict_batches: Annotated[int, Field(ge=0)] | Annotated[float, Field(ge=0, le=1)] | None = None
    fast_dev_run: bool | Annotated[int, Field(ge=0)] = Field(False, description="n batches of each stage, writes nothing")
    min_epochs: int | None = Field(None, ge=0, description="a stop request waits until this many epochs")
    min_steps: int | None = Field(None, ge=0, description="a stop request waits until this many optimizer steps")
    max_time: Any = Field(None, description='"DD:HH:MM:SS", a timedelta or a dict like {"hours": 2}')
    compile: bool | dict[str, Any] = Field(False, description="torch.compile the module: True or a dict of its options")
    profiler: bool | dict[str, Any] | None = Field(None, description="profile optimizer steps: True or a dict (wait, warmup, active, record_memory)")
    requeue: bool | None = Field(
        None, description="SLURM: after a stop signal, once last.ckpt is written, rank 0 requeues the job (scontrol requeue); None: on in a SLURM batch job"
    )
    requeue_signal: str | None = Field(
        "SIGUSR1", description="SLURM's warning signal (#SBATCH --signal=USR1@90), handled like SIGTERM inside a SLURM job; None: SIGTERM only"
    )

    @pydantic.field_validator("requeue_signal", mode="before")
    @classmethod
    def _check_requeue_signal(cls, value: Any) -> str | None:
        from trainer.strategies.requeue import parse_signal

        parsed = parse_signal(value)
        return None if parsed is None else parsed.name

    @pydantic.field_validator("compile")
    @classmethod
    def _check_compile(cls, value: Any) -> Any:
        allowed = {"mode", "fullgraph", "dynamic", "backend", "options"}
        if isinstance(value, dict) and set(value) - allowed:
            raise ValueError(f"unknown torch.compile option(s) {sorted(set(value) - allowed)}. Expected some of: {', '.join(sorted(allowed))}")
        return value

    @pydantic.field_validator("profiler")
    @classmethod
    def _check_profiler(cls, value: Any) -> Any:
        from trainer.logging.profiler import StepProfiler

        try:
            StepProfiler.from_arg(value)
        except (ValueError, TypeError) as error:
            raise ValueError(str(error).removeprefix("Trainer(profiler=...) ")) from None
        return value

    @pydantic.field_validator("max_epochs", "max_steps", mode="before")
    @classmethod
    def _minus_one_is_no_limit(cls, value: Any) -> Any:
        return None if value == -1 and not isinstance(value, bool) else value  # Lightning's spelling

    @pydantic.field_validator("max_time")
    @classmethod
    def _check_max_time(cls, value: Any) -> Any:
        from trainer.loops.schedule import parse_max_time

        try:
            parse_max_time(value)
        except (ValueError, TypeError) as error:
            raise ValueError(str(error).removeprefix("Trainer(max_time=...) ")) from None
        return value

    @pydantic.field_validator("precision")
    @classmethod
    def _check_precision(cls, value: Any) -> Any:
        from trainer.precision import PRECISIONS, Precision, precision_name

        if isinstance(value, Precision):
            return value
        name = precision_name(value)  # ours, or Lightning's spellings ("16-mixed", ...): the one place they map
        if name is not None:
            return name
        raise ValueError(f"expected one of {', '.join(map(repr, PRECISIONS))} or a Precision instance")

    @pydantic.field_validator("strategy")
    @classmethod
    def _check_strategy(cls, value: Any) -> Any:
        from trainer.strategies import Strategy
        from trainer.strategies.resolve import lightning_strategy

        if isinstance(value, Strategy) or (isinstance(value, str) and value in ("auto", "ddp", "fsdp", "single")):
            return value
        if isinstance(value, str):
            translated = lightning_strategy(value)  # Lightning's names: ours, or an error saying what to write
            if translated is not None:
                return translated
        raise ValueError("expected 'auto', 'ddp', 'fsdp', 'single' or a Strategy instance such as trainer.distributed.DDP(...) or FSDP(...)")

    @pydantic.field_validator("devices", mode="before")
    @classmethod
    def _check_devices(cls, value: Any) -> Any:
        if value == "auto" or value is None:  # Lightning's default: one process here unless torchrun says more
            return 1
        if isinstance(value, str) and value.strip().isdigit():
            return int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError("expected a number of processes (an int >= 1) or 'auto'; to pick GPU i write device='cuda:i'")
        return value

    @pydantic.field_validator("logger")
    @classmethod
    def _check_logger(cls, value: Any) -> Any:
        if isinstance(value, bool):
            return value
        missing = [m for m in ("log_metrics", "log_hyperparams", "flush", "close") if not callable(getattr(value, m, None))]
        if not missing:
            return value
        raise ValueError(
            "expected True, False or a logger with log_metrics(metrics, step), log_hyperparams(params), "
            f"flush() and close() (see trainer.loggers.Logger); missing: {', '.join(missing)}"
        )

    @pydantic.field_validator("callbacks")
    @classmethod
    def _check_callbacks(cls, value: list[Any] | None) -> list[Any] | None:
        from trainer.loops.hooks import CallbackBase  # trainer.Callback's base

        for item in value or []:
            if not isinstance(item, CallbackBase):
                raise ValueError(f"expected trainer.Callback instances, got {type(item).__name__}")
        return value

    @pydantic.field_validator("gradient_clip_val")
    @classmethod
    def _zero_is_no_clipping(cls, value: float | None) -> float | None:
        return None if value == 0 else value  # Lightning's rule (its 1.x default was 0.0)

    @pydantic.field_validator("device")
    @classmethod
    def _check_device(cls, value: str) -> str:
        import torch

        if value == "auto":
            return value
        try:
            device = torch.device(value)
        except (RuntimeError, ValueError):
            raise ValueError('expected "auto" or a torch device string such as "cpu" or "cuda:0"') from None
        available = _available_devices()
        if device.type == "cuda" and torch.cuda.is_available() and (device.index or 0) >= torch.cuda.device_count():
            raise ValueError(f"this machine has {torch.cuda.device_count()} CUDA device(s). Expected one of: {available}")
        if device.type != "cpu" and device.type not in {d.split(":")[0] for d in available}:
            raise ValueError(f"no {device.type.upper()} device is available here. Expected one of: {available}")
        return value

    @pydantic.field_validator("root_dir")
    @classmethod
    def _check_root_dir(cls, value: Path) -> Path:
        """The run folder must be creatable: checked now, without creating anything."""
        import os

        existing = value
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
        if not existing.is_dir():
            raise ValueError(f"{str(existing)!r} is a file, so no folder can be made under it. Expected a directory path")
        if not os.access(existing, os.W_OK | os.X_OK):
            raise ValueError(f"{str(existing)!r} is not writable. Expected a directory this process can write to")
        return value


def _available_devices() -> str:
    import torch

    found = ["auto", "cpu"]
    if torch.cuda.is_available():
        found += ["cuda"] + [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        found.append("mps")
    return ", ".join(found)


def validate_trainer_args(values: dict[str, Any]) -> TrainerArgs:
    """Validate `Trainer(...)` keyword arguments; raise one ValueError listing every problem."""
    try:
        return TrainerArgs(**values)
    except pydantic.ValidationError as error:
        lines = []
        for problem in error.errors():
            name = ".".join(str(part) for part in problem["loc"]) or "?"
            received = problem.get("input")
            message = problem["msg"].removeprefix("Value error, ")
            lines.append(
                f"Trainer({name}=...): {message}. Received: {received!r} of type {type(received).__name__}."
            )
        raise ValueError("\n".join(lines)) from None


def fast_dev_run_args(args: TrainerArgs) -> TrainerArgs:
    """The arguments of a `fast_dev_run=n` (True: 1): n batches of every stage, one epoch,
    no sanity check, no logger, no checkpoints, no profiler: a quick end-to-end check that
    writes nothing."""
    n = int(args.fast_dev_run)
    return args.model_copy(update=dict(
        max_epochs=1, max_steps=None, max_time=None, min_epochs=None, min_steps=None,
        limit_train_batches=n, limit_val_batches=n, limit_test_batches=n, limit_predict_batches=n,
        num_sanity_val_steps=0, val_check_interval=None, check_val_every_n_epoch=1,
        logger=False, enable_checkpointing=False, profiler=None,
    ))
