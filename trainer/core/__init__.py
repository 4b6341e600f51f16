"""The Trainer's own pieces, each a concern of `trainer.Trainer` that its file would
otherwise hold: read-only properties (`properties.py`), where loaders come from
(`data.py`), validate/test/predict (`evaluation.py`), Lightning's run flags such as
`deterministic` and `overfit_batches` (`flags.py`), `compile` (`compile.py`),
activation checkpointing (`activation_checkpointing.py`), `Module.load_from_checkpoint`
(`module_load.py`) and the weak back-references that let a finished run be freed at once
(`weak.py`). Nothing here imports the Trainer; the Trainer composes them.
"""
