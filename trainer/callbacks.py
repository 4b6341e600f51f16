"""Lightning's import path for the callbacks: `from trainer.callbacks import EarlyStopping`, as
`from lightning.pytorch.callbacks import EarlyStopping`, and `L.callbacks.EarlyStopping` after
`import trainer as L`; the package's modules under Lightning's path too
(`from trainer.callbacks.model_checkpoint import ModelCheckpoint`).

The same classes as `import callbacks` (`trainer.callbacks.EarlyStopping is
callbacks.EarlyStopping`). Nothing in `trainer` imports this module: `import trainer` does not
load the callbacks; a user's import of this path (or the first read of `trainer.callbacks`) does.

Example:
    >>> from trainer.callbacks import EarlyStopping
    >>> import callbacks
    >>> EarlyStopping is callbacks.EarlyStopping
    True
"""

from __future__ import annotations

import sys

from callbacks import *  # noqa: F403 - the package's public names, under Lightning's path
from callbacks import __all__ as __all__

# `import trainer.callbacks.early_stopping` finds the module already in sys.modules (Python looks
# there once the parent is imported), so each of the package's modules has one copy and one class
for _name, _module in list(sys.modules.items()):
    _parts = _name.split(".")
    if _parts[0] == "callbacks" and len(_parts) == 2 and not _parts[1].startswith("_") and _module is not None:
        sys.modules[f"{__name__}.{_parts[1]}"] = _module
        globals().setdefault(_parts[1], _module)
del _name, _module, _parts
