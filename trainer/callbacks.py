"""Lightning's import path for the callbacks: `from trainer.callbacks import EarlyStopping`, as
`from lightning.pytorch.callbacks import EarlyStopping`, and `L.callbacks.EarlyStopping` after
`import trainer as L`.

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

from callbacks import *  # noqa: F403 - the package's public names, under Lightning's path
from callbacks import __all__ as __all__
