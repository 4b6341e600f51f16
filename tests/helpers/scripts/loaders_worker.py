"""Several loaders per stage under `torchrun --nproc_per_node=2` (Gloo): a dict of two training
loaders of different lengths (combined, max_size_cycle), two validation loaders and a dict of
two test loaders. Each rank saves its weights, metrics, batch counts and the training samples
it saw to OUT_DIR/loaders_rank{r}.pt; tests/strategies/test_ddp_loaders.py checks them.

PHASE "uneven" evaluates loaders whose lengths differ per rank (uneven_rank{r}.pt).

PHASE "mixture" trains from a `Mixture` of two sources and writes a checkpoint at step 4 on the
way; "mixture_resume" continues that checkpoint in a new 2-process run.

Usage: python -m torch.distributed.run --standalone --nproc_per_node=2 loaders_worker.py PHASE OUT_DIR
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

from trainer import Callback, Module, Trainer
from trainer.utilities import Mixture

def regression(n: int, seed: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 3, generator=g)
    return TensorDataset(x, x.sum(-1, keepdim=True), torch.arange(n))


class Net(Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(3, 1)
        self.seen: list[Any] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.seen.append({key: part[2].tolist() for key, part in batch.items()})
        return sum(F.mse_loss(self.layer(part[0]), part[1]) for part in batch.values())

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.log("val_loss", F.mse_loss(self.layer(batch[0]), batch[1]))

    def test_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.log("test_loss", F.mse_loss(self.layer(batch[0]), batch[1]))

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def main(out: Path) -> None:
    torch.manual_seed(0)
    model = Net()
    trainer = Trainer(max_epochs=2, strategy="ddp", logger=False, enable_checkpointing=False, enable_progress_bar=False,
                      root_dir=str(out / "runs"), num_sanity_val_steps=0)
    train = {"long": DataLoader(regression(32, 0), batch_size=4, shuffle=True),
             "short": DataLoader(regression(12, 1), batch_size=2, shuffle=True)}
    val = [DataLoader(regression(16, 2), batch_size=4), DataLoader(regression(8, 3), batch_size=2)]
    trainer.fit(model, train, val)
    fitted = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val_loss")}
    num_val = list(trainer.num_val_batches)
    tested = trainer.test(model, {"a": DataLoader(regression(20, 4), batch_size=5), "b": DataLoader(regression(8, 5), batch_size=4)},
                          verbose=False)
    torch.save({"weights": {k: v.clone() for k, v in model.state_dict().items()}, "val": fitted, "num_val": num_val,
                "test": tested, "num_test": list(trainer.num_test_batches), "seen": model.seen,
                "num_training_batches": trainer.num_training_batches}, out / f"loaders_rank{os.environ['RANK']}.pt")


class MixtureNet(Net):
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        source, (x, y, index) = batch
        self.seen.append((source, index.tolist()))
        return F.mse_loss(self.layer(x), y)


class SaveAt(Callback):
    def __init__(self, step: int, path: Path) -> None:
        self.step, self.path = step, path

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if trainer.global_step == self.step:
            trainer.save_checkpoint(self.path)


def mixture(out: Path, resume: bool) -> None:
    torch.manual_seed(0)
    model = MixtureNet()
    checkpoint = out / "mixture_step4.ckpt"
    trainer = Trainer(max_epochs=2, strategy="ddp", logger=False, enable_checkpointing=False, enable_progress_bar=False,
                      root_dir=str(out / "mixture_runs"), callbacks=[] if resume else [SaveAt(4, checkpoint)])
    sources = {"web": DataLoader(regression(32, 0), batch_size=2, shuffle=True),
               "books": DataLoader(regression(8, 1), batch_size=2, shuffle=True)}
    trainer.fit(model, Mixture(sources, {"web": 0.5, "books": 0.5}, seed=2, length=6),
                ckpt_path=str(checkpoint) if resume else None)
    phase = "mixture_resume" if resume else "mixture"
    torch.save({"weights": {k: v.clone() for k, v in model.state_dict().items()}, "seen": model.seen},
               out / f"{phase}_rank{os.environ['RANK']}.pt")


class RankShare(IterableDataset):  # type: ignore[type-arg]
    """Batches of 2 samples of `data`, `counts[rank]` of them on each rank: uneven on purpose."""

    def __init__(self, data: TensorDataset, counts: tuple[int, int]) -> None:
        self.data, self.counts = data, counts

    def __iter__(self) -> Any:
        rank = int(os.environ["RANK"])
        start = sum(self.counts[:rank]) * 2
        for index in range(start, start + self.counts[rank] * 2, 2):
            yield tuple(part[index:index + 2] for part in self.data.tensors)


class PlainNet(Net):
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return F.mse_loss(self.layer(batch[0]), batch[1])


class MetricNet(Net):
    """One torchmetrics object per loader (the usual pattern), each logged for its loader."""

    def __init__(self) -> None:
        super().__init__()
        import torchmetrics

        self.means = torch.nn.ModuleList([torchmetrics.MeanMetric() for _ in range(3)])

    def test_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.means[dataloader_idx](F.mse_loss(self.layer(batch[0]), batch[1]))
        self.log("test_mean", self.means[dataloader_idx])


def uneven(out: Path) -> None:
    """Three loaders whose lengths differ per rank: loader 1 gives rank 0 three batches and rank 1
    one, loader 2 gives rank 1 none. Validation inside fit and `validate` finish on both ranks
    with every rank's batches in each loader's mean; a metric object logged for loader 2 (which
    rank 1 never runs) is a clear error on both ranks instead of a wait that never ends."""
    torch.manual_seed(0)
    data = [regression(8, 2), regression(8, 3), regression(8, 4)]

    def loaders() -> list[Any]:
        return [DataLoader(data[0], batch_size=2), DataLoader(RankShare(data[1], (3, 1)), batch_size=None),
                DataLoader(RankShare(data[2], (2, 0)), batch_size=None)]

    model = PlainNet()
    trainer = Trainer(max_epochs=2, strategy="ddp", logger=False, enable_checkpointing=False, enable_progress_bar=False,
                      root_dir=str(out / "uneven_runs"), num_sanity_val_steps=1)
    trainer.fit(model, DataLoader(regression(16, 0), batch_size=4), loaders())
    fitted = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val_loss")}
    validated = trainer.validate(model, loaders(), verbose=False)
    try:
        trainer.test(MetricNet(), loaders(), verbose=False)
        error = ""
    except RuntimeError as caught:
        error = str(caught)
    try:  # one loader, none of whose batches reach rank 1: the same error
        trainer.test(MetricNet(), loaders()[2], verbose=False)
        single = ""
    except RuntimeError as caught:
        single = str(caught)
    torch.save({"weights": {k: v.clone() for k, v in model.state_dict().items()}, "fit": fitted,
                "validate": validated, "error": error, "single": single}, out / f"uneven_rank{os.environ['RANK']}.pt")


if __name__ == "__main__":
    if sys.argv[1] == "main":
        main(Path(sys.argv[2]))
    elif sys.argv[1] == "uneven":
        uneven(Path(sys.argv[2]))
    else:
        mixture(Path(sys.argv[2]), resume=sys.argv[1] == "mixture_resume")
