"""The loop, split by what changes together.

- `context.py`: `RunContext`, what every loop works with (public fields the Trainer fills);
- `fit.py`: epochs and the batches of one epoch (`FitLoop`); `fit_validation.py`: the sanity
  check and the validations inside fit;
- `automatic.py` / `manual.py`: one optimization step, by the Trainer or by the module;
- `evaluation.py`: validation, test and predict passes (`EvalLoop`);
- `schedule.py`: when to validate, batch limits, `max_time`;
- `batches.py`: micro-batch windows and checks of what the user passed;
- `state.py`: `LoopState`, where the loop is (epoch, optimizer steps, batches of the epoch);
- `optimizers.py`: what `configure_optimizers` returned, in one shape;
- `data_order.py`: the data order of an epoch, for an exact mid-epoch resume;
- `signals.py`: interrupts that land between optimizer steps, never inside one;
  `early_signals.py`: SLURM's warning signal noted from `import trainer` on, for fit;
- `hooks.py`: which hooks exist, and calling them on the callbacks and the module;
- `resume.py`, `monitors.py`, `items.py`, `overrides.py`: checks of a resume, early checks of
  monitored metrics, item-weighted windows, the module's optimizer_step overrides;
- `worker_seeds.py`: DataLoader workers seeded as Lightning seeds them after
  `seed_everything(..., workers=True)`.

The loop talks to the precision and strategy objects only through their interfaces, so it
knows nothing of autocast details or torch.distributed.
"""
