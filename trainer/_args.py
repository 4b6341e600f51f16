"""The Trainer's arguments as one pydantic model: names, defaults and rules in one place.

`Trainer.__init__` validates through `TrainerArgs`, and the YAML config's `trainer:`
section is the same model, so the constructor and the config can't drift apart (a test
compares this model with `Trainer`'s signature).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from typing_extensions import TypedDict

import pydantic
from pydantic import BaseModel, ConfigDict, Field

from trainer._utils import check_run_name, parse_max_time, profiler_settings

__all__ = ["TrainerArgs", "validate_trainer_args", "fast_dev_run_args"]


class _ProgressLines(TypedDict, total=False):
    """`progress_lines={...}`: how often LineProgress writes a line (trainer/logging/live.py)."""

    __pydantic_config__ = ConfigDict(extra="forbid")  # type: ignore[misc]
    every_seconds: Annotated[float, Field(gt=0)] | None
    every_n_steps: Annotated[int, Field(ge=1)] | None


class TrainerArgs(BaseModel):
    """Every keyword argument of `Trainer`, with its default and its accepted values."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True, validate_default=False)

    precision: Any = Field("fp32", description='"fp32", "amp", "bf16" or a Precision instance')
    max_epochs: int | None = Field(None, ge=0, description="stop after this many epochs (0: the sanity check only)")
    max_steps: int | None = Field(None, ge=0, description="stop after this many optimizer steps (0: the sanity check only)")
    accumulate_grad_batches: int = Field(1, ge=1, description="micro-batches per optimizer step")
    gradient_clip_val: float | None = Field(None, ge=0, description="clip threshold; None or 0: no clipping")
    gradient_clip_algorithm: Literal["norm", "value"] = "norm"
    root_dir: Path | str = Field(
        Path("runs"), description="where runs write logs and checkpoints; a URL (s3://bucket/prefix): checkpoints "
        "there, logs in the local folder runs/<bucket>/<prefix>"
    )
    logger: Any = Field(True, description="True (TensorBoard), False, a logger, or a list of loggers")
    enable_progress_bar: bool = True
    progress_lines: bool | _ProgressLines | None = Field(
        None, description="whole lines instead of the bar: None: when stderr is not a terminal (SLURM log, CI, nohup); "
        "True/False: always/never; or {'every_seconds': 30, 'every_n_steps': None}"
    )
    performance_metrics: bool = Field(
        True, description="log train/flops_per_sec (FLOPs counted once on the first micro-batch), train/mfu on known GPUs "
        "and train/peak_memory_gib beside the throughput"
    )
    activation_checkpointing: bool | Annotated[int, Field(ge=1)] | Annotated[list[str | type[Any]], Field(min_length=1)] = Field(
        False, description="recompute activations in backward for submodules: a list of class names (or classes), "
        "True (a size rule: the outermost submodules of at least 1M parameters and at most half the model) or an int "
        "(that rule's threshold)"
    )
    enable_checkpointing: bool = True
    log_every_n_steps: int = Field(50, ge=1)
    callbacks: list[Any] | None = None
    seed: int | None = Field(None, ge=0, le=2**32 - 1, description="seeds Python, NumPy and torch when the Trainer is built and again when fit starts a run")
    device: str = Field("auto", description='"auto", "cpu", "cuda", "cuda:N", "mps"')
    strategy: Any = Field("auto", description='"auto", "ddp", "fsdp", "single" or a Strategy instance such as trainer.distributed.DDP(...) or FSDP(...)')
    devices: int = Field(1, ge=1, description="processes on this machine: N > 1 outside torchrun starts N-1 more running the same script")
    nonfinite_loss: Literal["error", "skip", "rollback", "off"] = Field(
        "error", description="fp32/bf16: what a non-finite loss does on any rank, on every rank: 'error' raises, 'skip' "
        "skips the step, 'rollback' goes back to the newest checkpoint with lower learning rates (amp skips such "
        "steps); 'off': no guard"
    )
    nonfinite_lr_backoff: float = Field(
        0.5, gt=0, le=1, description="nonfinite_loss='rollback': the learning rates' factor at each rollback"
    )
    loss_spike_factor: float | None = Field(
        None, gt=1, description="a window loss above this factor times the mean of the earlier ones counts as "
        "non-finite for nonfinite_loss (checked from the 20th step on, with no extra host read); None: off"
    )
    nonfinite_grad_norm: bool = Field(
        False, description="the guard also treats a non-finite gradient norm as a non-finite loss (one norm over "
        "the gradients per step, no extra host read)"
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
    profiler: bool | str | dict[str, Any] | None = Field(
        None, description="True/'pytorch' or a dict (wait, warmup, active, record_memory): torch.profiler traces of optimizer steps; "
        "'simple': the time spent in every hook and step, logged when fit ends"
    )
    requeue: bool | None = Field(
        None, description="SLURM: after a stop signal, once last.ckpt is written, rank 0 requeues the job (scontrol requeue); None: on in a SLURM batch job"
    )
    requeue_signal: str | None = Field(
        "SIGUSR1", description="SLURM's warning signal (#SBATCH --signal=USR1@90), handled like SIGTERM inside a SLURM job; None: SIGTERM only"
    )
    run_name: str | None = Field(
        None, description="the run's folder root_dir/default/<run_name>, the same on every rerun (ckpt_path='last' resumes it); "
        "None: a new version_N, or slurm-<job id> inside a SLURM batch job"
    )
    keep_last_checkpoints: int = Field(1, ge=1, description="last-style checkpoints kept: last.ckpt and the k-1 previous as last-step=N.ckpt")
    async_checkpointing: bool = Field(
        False, description="inside fit, copy the state off the training path and write the file in a background thread"
    )
    storage_options: dict[str, Any] | None = Field(
        None, description="for checkpoint paths that are URLs (s3://...): options of the fsspec file system (s3fs: "
        "key, secret, endpoint_url, client_kwargs, ...); None: the environment's (AWS_ACCESS_KEY_ID, AWS_ENDPOINT_URL, ...)"
    )
    # Lightning's flags, with Lightning's meaning (docs/lightning.md)
    enable_model_summary: bool = Field(True, description="log the model summary table (layers, parameters, size in MB) at INFO when fit starts")
    deterministic: bool | Literal["warn"] | None = Field(
        None, description="True/'warn': torch.use_deterministic_algorithms(True[, warn_only]) while the Trainer runs (restored after); None: unchanged"
    )
    benchmark: bool | None = Field(
        None, description="torch.backends.cudnn.benchmark while the Trainer runs (restored after); None: unchanged (False with deterministic=True)"
    )
    detect_anomaly: bool = Field(False, description="run fit under torch.autograd.detect_anomaly (slow; names the op that made a nan)")
    sync_batchnorm: bool = Field(False, description="under DDP/FSDP, BatchNorm layers become SyncBatchNorm (statistics over every rank)")
    inference_mode: bool = Field(True, description="evaluation runs under torch.inference_mode (False: torch.no_grad)")
    use_distributed_sampler: bool = Field(True, description="under DDP/FSDP, give DataLoaders a DistributedSampler; False: leave them as they are")
    overfit_batches: Annotated[int, Field(ge=0)] | Annotated[float, Field(ge=0, le=1)] = Field(
        0.0, description="n batches (int) or a fraction (float) of the training and validation loaders, unshuffled, every epoch"
    )
    reload_dataloaders_every_n_epochs: int = Field(
        0, ge=0, description="call train_dataloader()/val_dataloader() (datamodule or module) again every n epochs; 0: once"
    )
    barebones: bool = Field(False, description="no logger, progress bar, model summary, checkpointing or sanity check: the bare loop")
    enable_autolog_hparams: bool = Field(
        True, description="give the loggers the hyperparameters (and the module's graph) when a run starts; "
        "False: only what the module logs itself (self.logger.log_hyperparams(...))"
    )

    @pydantic.field_validator("run_name", mode="before")
    @classmethod
    def _check_run_name(cls, value: Any, info: pydantic.ValidationInfo) -> str | None:
        name = check_run_name(value, "")
        if name is not None and not isinstance(info.data.get("logger", True), bool):
            raise ValueError(
                "names the Trainer's own run folder; with a logger of your own, name the run on the logger "
                "(TensorBoardLogger(version=...)), whose folder is the run's"
            )
        return name

    @pydantic.field_validator("check_val_every_n_epoch")
    @classmethod
    def _check_val_every_n_epoch(cls, value: int | None, info: pydantic.ValidationInfo) -> int | None:
        interval = info.data.get("val_check_interval")
        if value is None and isinstance(interval, float):  # Lightning refuses it too
            raise ValueError(
                f"None counts val_check_interval over the whole run, which takes an int number of training "
                f"batches, and val_check_interval={interval!r} is a fraction of an epoch. Expected "
                f"val_check_interval=<batches> with check_val_every_n_epoch=None, or a fraction with "
                f"check_val_every_n_epoch=1"
            )
        return value

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
        try:
            profiler_settings(value)
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
        try:
            parse_max_time(value)
        except (ValueError, TypeError) as error:
            message = str(error).removeprefix("Trainer(max_time=...) ")
            raise ValueError(message.split(". Received: ")[0]) from None  # the input is added once, below
        return value

    @pydantic.field_validator("precision")
    @classmethod
    def _check_precision(cls, value: Any) -> Any:
        from trainer.lightning.arguments import precision_name
        from trainer.precision import PRECISIONS, Precision

        if isinstance(value, Precision):
            return value
        name = precision_name(value)  # ours, or Lightning's (trainer/lightning/arguments.py)
        if name is not None:
            return name
        raise ValueError(f"expected one of {', '.join(map(repr, PRECISIONS))} or a Precision instance")

    @pydantic.field_validator("strategy")
    @classmethod
    def _check_strategy(cls, value: Any) -> Any:
        from trainer.lightning.arguments import strategy_of
        from trainer.strategies import Strategy

        if isinstance(value, Strategy) or (isinstance(value, str) and value in ("auto", "ddp", "fsdp", "single")):
            return value
        if isinstance(value, str):
            translated = strategy_of(value)  # Lightning's names: ours, or an error saying what to write
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
        if isinstance(value, (list, tuple)):  # logger=[...]: each one is a logger; [] writes nothing
            for index, item in enumerate(value):
                missing = [m for m in ("log_metrics", "log_hyperparams", "flush", "close") if not callable(getattr(item, m, None))]
                if missing or isinstance(item, bool):
                    raise ValueError(
                        f"item {index} (a {type(item).__name__}) is not a logger: expected each item to have log_metrics(metrics, "
                        "step), log_hyperparams(params), flush() and close() (see trainer.loggers.Logger)"
                    )
            return list(value) if value else False
        missing = [m for m in ("log_metrics", "log_hyperparams", "flush", "close") if not callable(getattr(value, m, None))]
        if not missing:
            return value
        raise ValueError(
            "expected True, False, a logger with log_metrics(metrics, step), log_hyperparams(params), "
            f"flush() and close() (see trainer.loggers.Logger), or a list of them; missing: {', '.join(missing)}"
        )

    @pydantic.field_validator("callbacks")
    @classmethod
    def _check_callbacks(cls, value: list[Any] | None, info: pydantic.ValidationInfo) -> list[Any] | None:
        base = (info.context or {}).get("callback_base")  # trainer.Callback's base, named by the caller
        for item in value or []:
            if base is not None and not isinstance(item, base):
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

    @pydantic.field_validator("root_dir", mode="before")
    @classmethod
    def _check_root_dir(cls, value: Any) -> Path | str:
        """The run folder must be creatable: checked now, without creating anything. A URL
        (s3://...) is kept as written; its bucket is checked when fit starts."""
        import os

        from trainer._utils import is_url

        if is_url(value):
            return value
        if not isinstance(value, (str, os.PathLike)):
            raise ValueError(f"expected a folder path or a URL such as 's3://bucket/prefix'. Received: {value!r}")
        value = Path(value)
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


def validate_trainer_args(values: dict[str, Any], callback_base: type | None = None) -> TrainerArgs:
    """Validate `Trainer(...)` keyword arguments; raise one ValueError listing every problem.
    `callback_base`: the class every callback must be an instance of (`trainer.Callback`'s base)."""
    try:
        return TrainerArgs.model_validate(values, context={"callback_base": callback_base})
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
    """The arguments of a `fast_dev_run=n` (True: 1): n batches of every stage, one epoch and
    at most n optimizer steps (Lightning's `max_steps=n`), no sanity check, no logger, no
    checkpoints, no profiler: a quick end-to-end check that writes nothing."""
    n = int(args.fast_dev_run)
    return args.model_copy(update=dict(
        max_epochs=1, max_steps=n, max_time=None, min_epochs=None, min_steps=None,
        limit_train_batches=n, limit_val_batches=n, limit_test_batches=n, limit_predict_batches=n,
        num_sanity_val_steps=0, val_check_interval=None, check_val_every_n_epoch=1,
        logger=False, enable_checkpointing=False, profiler=None,
    ))
