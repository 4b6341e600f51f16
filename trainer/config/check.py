"""`trainer check-resume CONFIG`: the resume self-check on a YAML experiment.

The config is checked as `trainer fit` checks it; then every run of the check builds the
config's data and model afresh (a new process's objects) and trains with the config's
Trainer settings, in a temporary folder, without a logger, checkpoints of the run or the
config's callbacks (they may write files). See docs/checks.md.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from typing import Any

from trainer.config.classpath import ConfigError, Problem, ResolvedSpec, instantiate
from trainer.config.schema import prepare_config

__all__ = ["check_resume_command"]

log = logging.getLogger("trainer")


def check_resume_command(config: Any, overrides: dict[str, Any], steps: int, interrupt_at: Sequence[int] | None) -> int:
    """Run the check; print its report (rank 0); 0 when the resume is exact, 1 when not."""
    from trainer._utils import seed_everything
    from trainer.checks.resume import OWNED, check_resume
    from trainer.config.optim import attach_optimizers

    resolved = prepare_config(config, overrides, stage="fit")
    arguments = {key: value for key, value in resolved.trainer.items() if key not in OWNED and key != "max_steps"}
    for key in ("strategy", "precision"):
        value = arguments.get(key, resolved.precision if key == "precision" else None)
        arguments[key] = instantiate(value) if isinstance(value, ResolvedSpec) else value
    if arguments.get("precision") is None:
        arguments.pop("precision", None)
    if resolved.callbacks:
        log.info("check-resume: the config's callbacks are left out (they may write files); pass them to "
                 "trainer.check_resume(..., callbacks=[...]) from Python to include them.")

    def make_module() -> Any:
        model = instantiate(resolved.model)
        attach_optimizers(model, resolved.optimizer, resolved.lr_scheduler)
        return model

    def make_loader() -> Any:
        data = instantiate(resolved.data)
        loader = data.train_dataloader()
        if loader is None:
            raise ConfigError([Problem("data", f"{resolved.data.class_path}.train_dataloader() returned None. "
                                       "Expected the training loader.")])
        return loader

    if resolved.seed is not None:
        seed_everything(resolved.seed)  # as `trainer fit` does before it builds anything
    try:
        report = check_resume(make_module, make_loader, steps=steps, interrupt_at=interrupt_at, **arguments)
    except ValueError as error:
        if not str(error).startswith("check_resume"):
            raise
        raise ConfigError([Problem("check-resume", str(error))]) from None
    from torch import distributed as dist

    if not dist.is_initialized() or dist.get_rank() == 0:
        sys.stdout.write(f"{report}\n")
    return 0 if report.exact else 1
