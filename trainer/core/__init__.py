"""The Trainer's own pieces, each a concern of `trainer.Trainer` that its file would
otherwise hold: read-only properties (`properties.py`), where loaders come from
(`data.py`), fit from setup to teardown (`fit.py`), validate/test/predict (`evaluation.py`), Lightning's run flags such as
`deterministic` and `overfit_batches` (`flags.py`), `compile` (`compile.py`) and
activation checkpointing (`activation_checkpointing.py`). Nothing below the Trainer imports
them; the Trainer composes them.
"""
