"""Shared test setup.

The suite runs its own launchers (torchrun, fake SLURM tasks) on loopback. Run inside a real
SLURM job or torchrun, the inherited variables would make every Trainer join that job
(or call the real `scontrol requeue`), so they are removed before any test starts.
"""

from __future__ import annotations

import os

_LAUNCHER_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                       "TORCHELASTIC_RUN_ID", "GROUP_RANK", "ROLE_RANK")
for _name in list(os.environ):
    if _name.startswith("SLURM_") or _name in _LAUNCHER_VARIABLES:
        del os.environ[_name]
