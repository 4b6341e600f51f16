"""Optional behaviours built on `trainer`'s public API only."""

from __future__ import annotations

__all__: list[str] = []
