"""One training job for the real-cluster tests: `srun python cluster_worker.py OUT ROOT [key=value ...]`,
the same script under `torchrun`, and the two-agent runs in network namespaces.

TinyNet without dropout on 40 samples, 4 per rank and step, shuffled by the Trainer's
DistributedSampler; a validation loader (so a sanity check runs), a CSV logger logging every
step, checkpoints under ROOT, `ckpt_path="last"`. Options:

- `stops=a,b,...`: what the launch number `SLURM_RESTART_COUNT` (0, 1, ...) waits in for the
  test's signal: `start` (right after `import trainer`, before anything else), `sanity` (the
  sanity check), `stepN` (inside optimizer step N+1, global_step N), `none`. Each rank writes
  OUT/hold.<launch>.<rank> and holds until its signal has been noted (at most 90 s);
- `epochs=E` (default 2), `every=N` (a checkpoint every N steps as well, kept as
  `step-*.ckpt`), `die=A:K` (the launch A: rank 1 ends with `os._exit(1)` at global step
  K), `die_in_save=A:K` (the launch A: rank 0 dies halfway through writing the checkpoint of
  step K), `late=S` (in every launch after the first, rank 1 builds its Trainer S seconds
  after rank 0: a restarted worker slower than its peer).

Each rank writes OUT/result.<launch>.<rank>.pt: weights, global step, rank, world size.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

OUT, ROOT = Path(sys.argv[1]), Path(sys.argv[2])
OPTIONS = dict(item.split("=", 1) for item in sys.argv[3:])
LAUNCH = int(os.environ.get("SLURM_RESTART_COUNT") or os.environ.get("TORCHELASTIC_RESTART_COUNT") or 0)
STOPS = OPTIONS.get("stops", "").split(",") if OPTIONS.get("stops") else []
STOP = STOPS[LAUNCH] if LAUNCH < len(STOPS) else "none"
TASK = os.environ.get("SLURM_PROCID") or os.environ.get("RANK") or "0"

import trainer  # noqa: E402  (first: from here on a SLURM warning signal waits for fit)


def hold(noted: object) -> None:
    (OUT / f"hold.{LAUNCH}.{TASK}").write_text(str(os.getpid()))
    deadline = time.monotonic() + 90
    while not noted() and time.monotonic() < deadline:  # type: ignore[operator]
        time.sleep(0.01)


if STOP == "start":
    from trainer.loops import early_signals

    hold(lambda: bool(early_signals._pending))

import torch  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

from tests.helpers.reference import TinyNet, make_data, weights  # noqa: E402
from trainer import Callback, Trainer  # noqa: E402
from trainer.loggers import CSVLogger  # noqa: E402


class Hold(Callback):
    """Holds the sanity check or optimizer step N+1 until this rank's signal was noted."""

    def on_sanity_check_start(self, trainer: Trainer, module: object) -> None:
        if STOP == "sanity":
            hold(lambda: trainer.received_sigterm)

    def on_train_batch_start(self, trainer: Trainer, module: object, batch: object, batch_idx: int) -> None:
        if STOP == f"step{trainer.global_step}":
            hold(lambda: trainer.received_sigterm)


def launch_and_step(option: str) -> tuple[int, int]:
    launch, step = OPTIONS[option].split(":")
    return int(launch), int(step)


class Die(Callback):
    """In one launch, rank 1 ends hard at a step."""

    def on_train_batch_start(self, trainer: Trainer, module: object, batch: object, batch_idx: int) -> None:
        if (LAUNCH, trainer.global_step) == launch_and_step("die") and trainer.strategy.rank == 1:
            print(f"rank 1 exits hard at step {trainer.global_step}", flush=True)
            os._exit(1)


def die_in_save() -> None:
    """In one launch, rank 0 ends hard once half of the checkpoint of a step is on disk."""
    original = torch.save

    def save(obj: object, f: object, *args: object, **kwargs: object) -> None:
        loop = obj.get("loop", {}) if isinstance(obj, dict) else {}
        if isinstance(loop, dict) and (LAUNCH, loop.get("global_step")) == launch_and_step("die_in_save"):
            import io

            buffer = io.BytesIO()
            original(obj, buffer, *args, **kwargs)
            data = buffer.getvalue()
            if hasattr(f, "write"):
                f.write(data[: len(data) // 2])
                f.flush()
            else:
                Path(str(f)).write_bytes(data[: len(data) // 2])
            print(f"rank 0 dies while saving step {loop.get('global_step')}", flush=True)
            os._exit(1)
        original(obj, f, *args, **kwargs)

    torch.save = save


def main() -> None:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = TinyNet(dropout=0.0)
    callbacks: list[Callback] = [Hold()]
    if "die" in OPTIONS:
        callbacks.append(Die())
    if "die_in_save" in OPTIONS:
        die_in_save()
    if "every" in OPTIONS:
        from trainer.callbacks import ModelCheckpoint

        callbacks.append(ModelCheckpoint(every_n_train_steps=int(OPTIONS["every"]), save_top_k=-1, filename="step-{step}"))
    if LAUNCH > 0 and TASK == "1":
        time.sleep(float(OPTIONS.get("late", "0")))
    fit = Trainer(
        max_epochs=int(OPTIONS.get("epochs", "2")), seed=7, device="cpu", log_every_n_steps=1,
        enable_progress_bar=False, enable_model_summary=False, root_dir=ROOT, logger=CSVLogger(ROOT),
        callbacks=callbacks,
    )
    train = DataLoader(make_data(40), batch_size=4, shuffle=True)
    fit.fit(model, train, DataLoader(make_data(8, seed=1), batch_size=4), ckpt_path="last")
    rank = fit.strategy.rank
    result = {"weights": weights(model), "global_step": fit.global_step, "rank": rank,
              "world_size": fit.strategy.world_size, "launch": LAUNCH, "log_dir": str(fit.log_dir),
              "master_addr": os.environ.get("MASTER_ADDR"), "interface": os.environ.get("GLOO_SOCKET_IFNAME")}
    torch.save(result, OUT / f"result.{LAUNCH}.{rank}.pt")
    print(f"launch {LAUNCH} rank {rank} of {fit.strategy.world_size}: global_step {fit.global_step}", flush=True)


if __name__ == "__main__":
    main()
