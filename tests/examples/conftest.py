"""Fixtures of the example ports."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture
def one_thread() -> Iterator[None]:
    """Many small convolutions: on a loaded machine, a second intra-op thread that loses its core
    makes every op wait for it (ten times slower). Both runs of a test use the same count."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
