"""`SaveConfigCallback`: LightningCLI's hook for doing more with a run's resolved config.

A script subclasses it and overrides `save_config(trainer, pl_module, stage)`, e.g. to log
the config to the run's logger, then passes the class as `LightningCLI(...,
save_config_callback=MyCallback)`. The CLI writes `config.yaml` itself (unless
`save_config_kwargs={"save_to_log_dir": False}`); this callback only calls `save_config`,
once, on the main process, when the first stage starts, as Lightning's does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trainer.callback import Callback

if TYPE_CHECKING:
    from trainer.trainer import Trainer

__all__ = ["SaveConfigCallback"]


class SaveConfigCallback(Callback):
    """Calls `save_config` once, on global rank 0, at the first `setup`.

    Attributes:
        parser: the CLI's `LightningArgumentParser` (`parser.dump(config)` gives the YAML text).
        config: the resolved config (`cli.config`).
        config_filename, overwrite, multifile, save_to_log_dir: `save_config_kwargs`, as given.
    """

    def __init__(self, parser: Any, config: Any, config_filename: str = "config.yaml", overwrite: bool = False,
                 multifile: bool = False, save_to_log_dir: bool = True) -> None:
        self.parser, self.config = parser, config
        self.config_filename, self.overwrite = config_filename, overwrite
        self.multifile, self.save_to_log_dir = multifile, save_to_log_dir
        self.already_saved = False

    def setup(self, trainer: Trainer, module: Any, stage: str) -> None:
        if self.already_saved:
            return
        if trainer.is_global_zero:
            self.save_config(trainer, module, stage)
        self.already_saved = True

    def save_config(self, trainer: Trainer, pl_module: Any, stage: str) -> None:
        """Override to do something with `self.config` (the config file is already written)."""
