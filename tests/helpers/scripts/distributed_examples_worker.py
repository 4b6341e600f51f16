"""pytorch/examples' distributed examples under torchrun (2 processes, Gloo), each script's own
loop next to its port, in one launch:

- ddp-tutorial-series (tests/helpers/examples/ddp_tutorial.py): the script's `Trainer` class and
  the port, each run whole (4 epochs) and stopped after 2 epochs then started again from its
  snapshot / checkpoint, for the script's loss and for an MSE loss;
- distributed/ddp/example.py's one step;
- distributed/minGPT-ddp's Trainer class (tests/helpers/examples/mingpt_ddp.py), whole and
  stopped after 2 of 3 epochs, and its port;
- distributed/FSDP2 (tests/helpers/examples/fsdp2.py): the port built on the meta device.

Usage: python -m torch.distributed.run --standalone --nproc_per_node=2 distributed_examples_worker.py OUT_DIR
Each rank saves OUT_DIR/distributed_examples_rank{r}.pt; tests/examples/test_distributed_examples.py
reads them.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader

from callbacks import ModelCheckpoint
from tests.helpers.examples import mingpt_ddp
from tests.helpers.examples.fsdp2 import STEPS, FSDP2Example, FSDP2ExampleEmptyInit, steps_loader
from tests.helpers.examples.fsdp2 import original as fsdp2_original
from tests.helpers.examples.ddp_tutorial import demo_basic, load_train_objs, original, port_objs, toy_objs
from trainer import Trainer
from trainer.distributed import FSDP

RANK = int(os.environ["RANK"])
EPOCHS, STOP = 4, 2


class Epochs(ModelCheckpoint):
    """The script's snapshot every epoch (save_every=1), recording the epochs this run trains."""

    def __init__(self) -> None:
        super().__init__(every_n_epochs=1)
        self.run: list[int] = []

    def on_train_epoch_start(self, trainer: Any, module: Any) -> None:
        self.run.append(trainer.current_epoch)


def port(loss: str, root: Path, max_epochs: int) -> dict[str, Any]:
    epochs = Epochs()
    trainer = Trainer(strategy="ddp", device="cpu", max_epochs=max_epochs, root_dir=root, callbacks=[epochs],
                      logger=False, enable_progress_bar=False, enable_model_summary=False)
    model, loader = port_objs(loss)  # after the Trainer: its process group is what DistributedSampler reads
    trainer.fit(model, loader, ckpt_path="last")
    return {"weights": {k: v.clone() for k, v in model.model.state_dict().items()}, "epochs": epochs.run,
            "global_step": trainer.global_step}


def ddp_example() -> dict[str, Any]:
    """distributed/ddp/example.py: each rank's own batch (no DistributedSampler: the Trainer is
    told not to add one), one step."""
    model, batch = toy_objs(RANK)
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    trainer = Trainer(strategy="ddp", device="cpu", max_steps=1, use_distributed_sampler=False, logger=False,
                      enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(model, DataLoader([batch], batch_size=None))
    return {"initial": initial, "port": {k: v.clone() for k, v in model.state_dict().items()}}


def gpt_port(root: Path, max_epochs: int) -> dict[str, Any]:
    """distributed/minGPT-ddp's port: the snapshot every epoch is ModelCheckpoint's."""
    trainer = Trainer(strategy="ddp", device="cpu", max_epochs=max_epochs, gradient_clip_val=1.0, root_dir=root,
                      callbacks=[ModelCheckpoint(every_n_epochs=1)], num_sanity_val_steps=0, logger=False,
                      enable_progress_bar=False, enable_model_summary=False)
    model, train_loader, test_loader = mingpt_ddp.port_objs()
    trainer.fit(model, train_loader, test_loader, ckpt_path="last")
    return gpt_result(model)


def gpt_result(model: Any) -> dict[str, Any]:
    return {"weights": {k: v.clone() for k, v in model.state_dict().items()}, "train_losses": model.train_losses,
            "eval_losses": model.eval_losses}


def fsdp2(out: Path) -> dict[str, Any]:
    """distributed/FSDP2: the port built under `torch.device("meta")`, then under Lightning's
    `trainer.init_module(empty_init=True)`, then stopped after 2 of the 4 steps with a
    checkpoint and resumed from it; then the script's own loop."""
    found: dict[str, Any] = {}
    runs = (("port", FSDP2Example, STEPS), ("empty_init", FSDP2ExampleEmptyInit, STEPS),
            ("stopped", FSDP2Example, STEPS // 2), ("resumed", FSDP2Example, STEPS))
    for name, cls, steps in runs:
        torch.manual_seed(0)
        model = cls()
        saves = dict(callbacks=[ModelCheckpoint(every_n_train_steps=STEPS // 2)], root_dir=out / "fsdp2",
                     enable_checkpointing=True) if name in ("stopped", "resumed") else dict(enable_checkpointing=False)
        trainer = Trainer(strategy=FSDP(shard_modules=["TransformerBlock"]), device="cpu", max_steps=steps,
                          gradient_clip_val=1.0, use_distributed_sampler=False, logger=False,
                          enable_progress_bar=False, enable_model_summary=False, **saves)
        trainer.fit(model, steps_loader(), ckpt_path="last" if name == "resumed" else None)
        found[name] = {k.removeprefix("model."): v.full_tensor() for k, v in model.state_dict().items()}
        found[f"{name}_global_step"] = trainer.global_step
        if name == "empty_init":
            found["built_on_meta"] = model.built_on_meta
    found["script"] = fsdp2_original()
    return found


def main() -> None:
    torch.set_num_threads(1)
    out = Path(sys.argv[1])
    results: dict[str, Any] = {loss: {} for loss in ("cross_entropy", "mse")}
    for loss, found in results.items():  # the ports first: the Trainer makes the process group
        found["port_whole"] = port(loss, out / f"port_whole_{loss}", EPOCHS)
        found["port_stopped"] = port(loss, out / f"port_{loss}", STOP)
        found["port_resumed"] = port(loss, out / f"port_{loss}", EPOCHS)
    toy = ddp_example()
    gpt: dict[str, Any] = {"port_whole": gpt_port(out / "gpt_whole", 3), "port_stopped": gpt_port(out / "gpt", 2),
                           "port_resumed": gpt_port(out / "gpt", 3)}
    if not dist.is_initialized():  # the script's ddp_setup, on CPU (the Trainer's group serves)
        dist.init_process_group(backend="gloo")
    for loss, found in results.items():
        found["initial"] = {k: v.clone() for k, v in load_train_objs()[1].state_dict().items()}
        found["script_whole"] = original(EPOCHS, 1, str(out / f"whole_{loss}.pt"), loss)
        snapshot = str(out / f"snapshot_{loss}.pt")
        found["script_stopped"] = original(STOP, 1, snapshot, loss)
        dist.barrier()  # rank 0's snapshot is on disk before either rank starts again
        found["snapshot_epochs_run"] = torch.load(snapshot)["EPOCHS_RUN"]
        found["script_resumed"] = original(EPOCHS, 1, snapshot, loss)
        epochs = list(range(STOP)) + list(range(STOP - 1, EPOCHS))  # epoch 1 again: what the resume runs
        found["script_epoch_again"] = original(EPOCHS, 1, str(out / "none.pt"), loss, epochs=epochs)
    results["ddp_example"] = dict(toy, script=demo_basic(RANK))
    gpt["script_whole"] = gpt_result(mingpt_ddp.original(3, str(out / "gpt_whole.pt")))
    gpt["script_stopped"] = gpt_result(mingpt_ddp.original(2, str(out / "gpt.pt")))
    dist.barrier()  # rank 0's snapshot is on disk before either rank starts again
    gpt["script_resumed"] = gpt_result(mingpt_ddp.original(3, str(out / "gpt.pt")))
    results["mingpt"] = gpt
    results["fsdp2"] = fsdp2(out)
    torch.save(results, out / f"distributed_examples_rank{RANK}.pt")
    dist.destroy_process_group()

if __name__ == "__main__":
    main()
