"""Checkpoints: the file format, the Trainer's state, and the sharded folders FSDP writes.

- `format.py`: atomic writes, checked loads that never execute code; `schema.py`: the format
  marker, `CheckpointError`, the layout check and plain data; `digest.py`: the whole-file CRC-32
  stored as the zip comment;
- `layout.py`: files of older versions of ours read with the current keys (Lightning's files and
  keys: `trainer/lightning/checkpoint.py`);
- `registry.py`: the registry of stateful parts a checkpoint is made of (each registered once);
- `parts.py`: the Trainer's parts (weights and optimizers through the strategy, schedulers,
  precision, loop, loggers, callbacks, data order, random streams, ...);
- `state.py`: the Trainer's whole state as a checkpoint dict (the parts, the cut, Lightning's keys), and back;
- `sharded.py`: a folder of shards every rank writes (FSDP), with the single file's guarantees;
  `sharded_remote.py`: the same in a bucket (version folders committed by an object);
  `dcp_index.py`: DCP's index read without running code;
- `latest.py`: `ckpt_path="last"`, the newest complete checkpoint of the run, among the
  `candidates.py` of the run of the same experiment (`run_facts.py`);
- `storage.py`: a checkpoint's location, a local path or a URL (`s3://...`) with the same guarantees;
  `remote_path.py`: a URL as a path (`RemotePath`), its uploads committed last, its errors said plainly.

Example:
    >>> from trainer.checkpoint import CheckpointError, load_checkpoint
    >>> try:
    ...     load_checkpoint("missing.ckpt")
    ... except CheckpointError as error:
    ...     print(str(error).split(". ")[0])
    Checkpoint 'missing.ckpt' does not exist
"""

from __future__ import annotations

from trainer.checkpoint.format import (
    FORMAT,
    FORMAT_VERSION,
    CheckpointError,
    check_layout,
    load_checkpoint,
    plain_state,
    remove_checkpoint,
    save_atomic,
)
from trainer.checkpoint.sharded import export_weights
from trainer.checkpoint.storage import RemotePath, StorageError, is_remote, location
from trainer.checkpoint.state import (
    callback_keys,
    collect_state,
    collect_weights,
    cut_problem,
    restore_module,
    restore_state,
)

__all__ = [
    "cut_problem",
    "FORMAT",
    "FORMAT_VERSION",
    "CheckpointError",
    "save_atomic",
    "load_checkpoint",
    "collect_state",
    "restore_state",
    "restore_module",
    "callback_keys",
    "plain_state",
    "check_layout",
    "collect_weights",
    "export_weights",
    "remove_checkpoint",
    "RemotePath",
    "StorageError",
    "is_remote",
    "location",
]
