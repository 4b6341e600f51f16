"""Lightning's `MisconfigurationException`, for code that raises or catches it by that name.

The Trainer itself raises `ValueError` for a bad argument (with what was expected and how to
fix it); this class is a `ValueError` too, so `except ValueError` catches both.
"""

from __future__ import annotations

__all__ = ["MisconfigurationException"]


class MisconfigurationException(ValueError):
    """A setting that can't work (Lightning's name)."""
