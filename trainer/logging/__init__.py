"""What a run writes and shows: its folder, loggers, metrics, progress bars and profiles.

- `output.py`: `RunOutput`, what a run writes and shows (its folder, loggers, step scalars,
  progress bar): the few calls the loop makes to write (its folder and loggers: `output_folder.py`);
  `host.py` types what it reads of the run;
- `runs.py`: run folders (named, SLURM's, `version_N`), and how a rerun finds its own;
- `summary.py`: the summary line and the model summary logged when fit starts;
- `tensorboard.py`: `TensorBoardLogger` and `Logger`, the protocol (public as `trainer.loggers`);
- `csv.py`, `wandb.py`, `mlflow.py`: `CSVLogger`, `WandbLogger`, `MLflowLogger` (the last two
  import their library when their run starts; `extras.py` says how to install it);
- `multi.py`: `LoggerList`, `logger=[...]`;
- `identity.py`: a logger's run identity, saved in checkpoints so a resume continues its run;
- `metrics.py`: where `Module.log` values go, kept on their device until read; `reduction.py`: the
  running reductions and their read to the host; `callback_view.py`: `trainer.callback_metrics`;
  `monitor_error.py`: `MonitorError`;
- `progress.py`: the tqdm bars;
- `profiler.py`: `Trainer(profiler=...)`, traces of chosen optimizer steps.
"""
