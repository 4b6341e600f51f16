"""Runs FSDP scenarios under `torchrun --nproc_per_node=2`; each rank saves its results.

Usage: python -m torch.distributed.run --standalone --nproc_per_node=2 fsdp_worker.py PHASE OUT_DIR
The test (tests/strategies/test_fsdp.py) reads OUT_DIR/PHASE_rank{r}.pt and compares with one process.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

from tests.helpers.reference import TinyNet, make_data
from callbacks import ModelCheckpoint
from trainer import Callback, Module, Trainer
from trainer.distributed import FSDP
from trainer.precision import AMP

RANK = int(os.environ.get("RANK", "0"))  # 0 when the test imports this module
SCALER = {"init_scale": 2.0**10}
#: (precision, accumulate, clip, optimizer) of each parity case
CASES = [("fp32", 3, 0.5, "sgd"), ("bf16", 1, None, "adam"), ("amp", 2, 0.5, "adam")]


def full(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The whole weights on every rank (sharded ones gathered)."""
    out = {}
    for key, value in model.state_dict().items():
        gather = getattr(value, "full_tensor", None)
        out[key] = (gather() if callable(gather) else value).detach().clone()
    return out


class Norms(Callback):
    """The global gradient norm (unscaled) of every optimizer step, before clipping."""

    def __init__(self) -> None:
        self.norms: list[float] = []

    def on_before_optimizer_step(self, trainer: Any, module: Any, optimizer: Any) -> None:
        self.norms.append(float(trainer.precision.gradient_norm(optimizer, list(module.parameters()))))


class TiedLM(Module):
    """A language model whose output layer is its embedding (tied weights)."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(50, 8)
        self.body = torch.nn.Linear(8, 8)
        self.head = torch.nn.Linear(8, 50, bias=False)
        self.head.weight = self.emb.weight

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        (tokens,) = batch
        logits = self.head(torch.tanh(self.body(self.emb(tokens[:, :-1]))))
        return torch.nn.functional.cross_entropy(logits.reshape(-1, 50), tokens[:, 1:].reshape(-1))

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.5)


def tokens() -> Any:
    return torch.utils.data.TensorDataset(torch.randint(0, 50, (32, 6), generator=torch.Generator().manual_seed(1)))


def tied(global_batch: int, strategy: Any) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    net = TiedLM()
    trainer(strategy, "fp32", 1, None, max_epochs=1).fit(net, DataLoader(tokens(), batch_size=global_batch, shuffle=False))
    return full(net)


class Overflowing(TinyNet):
    """Under amp, one element of `probe` gets a gradient of 1e36 x scale, beyond float32
    until the scale has backed off a few times. Sharded, that element lives on rank 1 only,
    so the ranks must combine their found-inf flags to skip the same steps (float32
    parameters, as under DDP: `mixed_precision=False`)."""

    def __init__(self) -> None:
        super().__init__(dropout=0.0, optimizer="adam", lr=0.01)
        self.probe = torch.nn.Parameter(torch.zeros(4))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = super().training_step(batch, batch_idx)
        return loss + (self.probe * torch.tensor([0.0, 0.0, 0.0, 1e36])).sum()


class Uneven(DistributedSampler):
    """Rank 0 reads 3 samples, rank 1 reads 7."""

    def __iter__(self) -> Any:
        return iter([0, 1, 2] if self.rank == 0 else [3, 4, 5, 6, 7, 8, 9])

    def __len__(self) -> int:
        return 3 if self.rank == 0 else 7


def model(optimizer: str, seed: int = 0) -> TinyNet:
    torch.manual_seed(seed)
    return TinyNet(dropout=0.0, optimizer=optimizer, lr=0.05)


def trainer(strategy: Any, precision: str, accumulate: int, clip: float | None, **kwargs: Any) -> Trainer:
    options: dict[str, Any] = dict(logger=False, enable_progress_bar=False, enable_checkpointing=False)
    options.update(kwargs)
    return Trainer(
        strategy=strategy,
        device="cpu",
        precision=AMP(**SCALER) if precision == "amp" else precision,
        accumulate_grad_batches=accumulate,
        gradient_clip_val=clip,
        **options,
    )


def parity(results: dict[str, Any]) -> None:
    data = make_data(48)
    for precision, accumulate, clip, optimizer in CASES:
        for name in ("fsdp", "ddp"):
            strategy = FSDP(shard_modules=["Linear"]) if name == "fsdp" else "ddp"
            norms = Norms()
            net = model(optimizer)
            t = trainer(strategy, precision, accumulate, clip, max_epochs=2, callbacks=[norms])
            t.fit(net, DataLoader(data, batch_size=4, shuffle=False))
            results[f"{name}/{precision}"] = {
                "weights": full(net),
                "norms": norms.norms,
                "global_step": t.global_step,
                "scale": float(t.precision.scaler.get_scale()) if precision == "amp" else None,
                "metrics": dict(t.callback_metrics),
            }
    # The other options: parameters kept gathered between forward and backward; float32
    # parameters gathered under bf16 (autocast still computes in bfloat16).
    for key, strategy, (precision, accumulate, clip, optimizer) in (
        ("keep_gathered/fp32", FSDP(shard_modules=["Linear"], reshard_after_forward=False), CASES[0]),
        ("fp32_params/bf16", FSDP(shard_modules=["Linear"], mixed_precision=False), CASES[1]),
    ):
        net = model(optimizer)
        trainer(strategy, precision, accumulate, clip, max_epochs=2).fit(net, DataLoader(data, batch_size=4, shuffle=False))
        results[key] = {"weights": full(net)}
    # amp: an overflow in one rank's shard only
    for name in ("fsdp", "ddp"):
        torch.manual_seed(0)
        net = Overflowing()
        strategy = FSDP(shard_modules=["Linear"], mixed_precision=False) if name == "fsdp" else "ddp"
        t = trainer(strategy, "amp", 1, None, max_epochs=2)
        t.fit(net, DataLoader(data, batch_size=4, shuffle=False))
        results[f"overflow/{name}"] = {"weights": full(net), "scale": float(t.precision.scaler.get_scale()),
                                       "skipped": t.state.skipped_steps, "global_step": t.global_step}
    # Tied weights: the size rule leaves the embedding and the output layer to the root
    results["tied"] = tied(4, FSDP(min_shard_params=50))
    # The size rule (no class names): the 16x6 and 1x16 layers hold 112 and 17 parameters.
    net = model("sgd")
    t = trainer(FSDP(min_shard_params=100), "fp32", 1, None, max_epochs=1)
    t.fit(net, DataLoader(data, batch_size=4, shuffle=False))
    results["size_rule"] = {"units": sorted(type(m).__name__ + ":" + str(m.weight.shape[1]) for m in net.modules() if type(m).__name__.startswith("FSDP"))}
    # Validation through the sharded model, after fit, and a user DistributedSampler built
    # before fit (the group exists once the Trainer does).
    val = make_data(10, seed=1)
    sampler = DistributedSampler(val, shuffle=False)
    results["validate"] = t.validate(net, DataLoader(val, batch_size=5, sampler=sampler))
    results["size_rule"]["weights"] = full(net)
    inputs = torch.utils.data.TensorDataset(val.tensors[0])  # predict_step's default: self(batch)
    results["predict"] = t.predict(net, DataLoader(inputs, batch_size=5, collate_fn=lambda rows: torch.stack([r[0] for r in rows])))
    try:  # a sampler with uneven shares: one clear error on every rank, not a hang
        t.validate(net, DataLoader(val, batch_size=1, sampler=Uneven(val)))
        results["uneven"] = "no error"
    except ValueError as error:
        results["uneven"] = str(error)


class Terminate(Callback):
    """Sends this process SIGTERM after optimizer step `at` (every rank: a cluster's stop)."""

    def __init__(self, at: int) -> None:
        self.at = at

    def on_train_step_end(self, trainer: Any, module: Any, stepped: bool) -> None:
        if trainer.global_step == self.at:
            os.kill(os.getpid(), signal.SIGTERM)


class DropoutNet(TinyNet):
    """Dropout draws differ per rank (seeded per rank by the Trainer), so an exact resume
    needs every rank's own random state back."""


def resume_trainer(out: Path, root: str, **kwargs: Any) -> Trainer:
    return trainer(
        FSDP(shard_modules=["Linear"]), "amp", 2, 0.5, max_epochs=3, seed=7, log_every_n_steps=1,
        enable_checkpointing=True, root_dir=out / root, logger=True, **kwargs,  # the logged norm is a collective
    )


def resume_model() -> TinyNet:
    torch.manual_seed(3)
    return TinyNet(dropout=0.1, optimizer="adam", lr=0.01)


def resume(results: dict[str, Any], out: Path) -> None:
    data = make_data(40)
    loader = lambda: DataLoader(data, batch_size=4, shuffle=True)  # noqa: E731
    whole = resume_model()
    # ModelCheckpoint's folders: saves must not change the run, and top-k removes folders
    keep = ModelCheckpoint(every_n_train_steps=2, save_top_k=1)
    resume_trainer(out, "whole", callbacks=[keep]).fit(whole, loader())
    results["whole"] = full(whole)
    results["kept"] = sorted(p.name for p in Path(keep.dirpath).iterdir()) if RANK == 0 else None
    cut = resume_model()
    t = resume_trainer(out, "cut", callbacks=[Terminate(at=4)])  # mid-epoch 1 (5 steps an epoch)
    t.fit(cut, loader())
    results["stopped_at"] = t.global_step
    results["cut"] = full(cut)
    last = Path(t.log_dir) / "last.ckpt"
    results["last_is_folder"] = last.is_dir()
    results["last_files"] = sorted(p.name for p in last.iterdir()) if last.is_dir() else []
    # Export: one ordinary file of the whole weights (rank 0 writes it; no process group needed),
    # and a copy of the folder as it was at the stop (the resumed run writes on in the same folder).
    if RANK == 0:
        from trainer.checkpoint import export_weights

        export_weights(last, out / "exported.pt")
        shutil.copytree(last, out / "at_stop.ckpt")
    t.strategy.barrier()
    results["at_stop"] = torch.load(out / "exported.pt", weights_only=True)
    resumed = resume_model()
    t2 = resume_trainer(out, "cut")
    t2.fit(resumed, loader(), ckpt_path="last")
    results["resumed"] = full(resumed)
    results["resumed_step"] = t2.global_step
    results["resumed_in"] = str(t2.log_dir) == str(t.log_dir)


def save_loop(results: dict[str, Any], out: Path) -> None:
    """Saves the same folder over and over, so the test can kill the job mid-save."""
    (out / f"pid_rank{RANK}").write_text(str(os.getpid()))  # torchrun starts ranks in their own sessions
    net = resume_model()
    t = resume_trainer(out, "loop", max_steps=2)
    t.fit(net, DataLoader(make_data(16), batch_size=4))
    target = out / "loop.ckpt"
    for number in range(1000):
        with torch.no_grad():
            for parameter in net.parameters():
                parameter.fill_(float(number))  # every save holds one number throughout
        t.save_checkpoint(target)
        if RANK == 0:  # atomically: the kill may land while this is written
            (out / "saved.tmp").write_text(str(number))
            os.replace(out / "saved.tmp", out / "saved.txt")


def from_file(results: dict[str, Any], out: Path) -> None:
    """A single-file checkpoint (written by one process, tests/strategies/test_fsdp.py) continues under
    FSDP: whole weights and optimizer state are sharded as they load."""
    net = model("adam")
    t = trainer(FSDP(shard_modules=["Linear"]), "fp32", 1, 0.5, max_steps=6, max_epochs=1)
    t.fit(net, DataLoader(make_data(48), batch_size=4, shuffle=False), ckpt_path=out / "single.ckpt")
    results["weights"] = full(net)
    results["global_step"] = t.global_step
    results["validate"] = t.validate(net, DataLoader(make_data(10, seed=1), batch_size=5), ckpt_path=out / "single.ckpt")


def background(results: dict[str, Any], out: Path) -> None:
    """The resume scenario with async_checkpointing=True and keep_last_checkpoints=2: shards
    written by dcp.async_save while training goes on, against the same run saving synchronously."""
    data = make_data(40)
    loader = lambda: DataLoader(data, batch_size=4, shuffle=True)  # noqa: E731
    for mode, asynchronous in (("sync", False), ("async", True)):
        whole = resume_model()
        keep = ModelCheckpoint(every_n_train_steps=2, save_top_k=1)
        t = resume_trainer(out, mode, callbacks=[keep], async_checkpointing=asynchronous, keep_last_checkpoints=2)
        t.fit(whole, loader())
        results[mode] = full(whole)
        if RANK == 0:
            results[f"{mode}_kept"] = sorted(p.name for p in Path(keep.dirpath).iterdir())
            results[f"{mode}_run"] = sorted(p.name for p in Path(t.log_dir).iterdir() if p.name.endswith(".ckpt"))
    cut = resume_model()
    resume_trainer(out, "cut", callbacks=[Terminate(at=4)], async_checkpointing=True).fit(cut, loader())
    resumed = resume_model()
    t2 = resume_trainer(out, "cut", async_checkpointing=True)
    t2.fit(resumed, loader(), ckpt_path="last")
    results["resumed"], results["resumed_step"] = full(resumed), t2.global_step


def main() -> None:
    phase, out = sys.argv[1], Path(sys.argv[2])
    results: dict[str, Any] = {}
    if phase == "parity":
        parity(results)
    elif phase == "resume":
        resume(results, out)
    elif phase == "from_file":
        from_file(results, out)
    elif phase == "save_loop":
        save_loop(results, out)
    elif phase == "background":
        background(results, out)
    torch.save(results, out / f"{phase}_rank{RANK}.pt")


if __name__ == "__main__":
    main()
