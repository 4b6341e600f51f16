"""Lightning's spellings, translated where they enter: code written for PyTorch Lightning
runs here with its imports changed, and each boundary that reads it has one entry here.

- `arguments.py`: `Trainer(...)`'s arguments as Lightning names them (`default_root_dir`,
  `accelerator`, `devices=[i]`, ...), its precision names (`"16-mixed"`, `"bf16-mixed"`,
  `"32-true"`, ...) and strategy names (`"ddp_find_unused_parameters_true"`, ...), and the same
  spellings in a YAML file's `trainer:` section (LightningCLI's layout). Entered from the
  Trainer's argument validation (`trainer/_args.py`, `trainer/trainer.py`) and the YAML
  schema (`trainer/config/schema.py`);
- `checkpoint.py`: Lightning's checkpoint keys beside ours in the files we write, and the
  files Lightning writes read into our layout. Entered from the checkpoint reader and
  writer (`trainer/checkpoint/format.py`, `trainer/checkpoint/state.py`).

What goes down from here is our own names only: `strategies/`, `precision.py` and the
loops never see Lightning's spellings. This package imports only those lower layers
(`strategies/`, `precision.py`, `_utils.py`), never the Trainer or the YAML layer.

What Lightning's users call on our objects is the API, not a translation, and stays with
the objects: the hook names and `self.log(..., reduce_fx=...)` (`trainer/module/`), the
Trainer's properties and `fit(train_dataloaders=...)`, the strategy classes
`trainer.strategies.DDPStrategy`, ... (`trainer/strategies/lightning.py`, below this package)
and the strategy's `root_device`, `reduce`, ... (`trainer/strategies/_lightning_attributes.py`).
LightningCLI (`trainer/config/script.py`) is the YAML layer's own command line and lives there.
"""
