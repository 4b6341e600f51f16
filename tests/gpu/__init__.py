"""The GPU suite: `python -m pytest -m gpu` on a machine with one CUDA GPU (skipped elsewhere)."""
