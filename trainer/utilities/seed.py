"""Lightning's `utilities.seed` path: the DataLoader worker seeding that
`seed_everything(seed, workers=True)` turns on (trainer/loops/worker_seeds.py)."""

from trainer._utils import seed_everything
from trainer.loops.worker_seeds import pl_worker_init_function, seed_workers

__all__ = ["seed_everything", "pl_worker_init_function", "seed_workers"]
