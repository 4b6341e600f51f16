"""`trainer._utils`: the small helpers every layer uses."""

from __future__ import annotations

import collections
import dataclasses

import torch

from trainer._utils import move_to_device


def test_move_to_device_handles_nesting_and_leaves_other_leaves():
    Pair = collections.namedtuple("Pair", "a b")

    @dataclasses.dataclass
    class Item:
        x: torch.Tensor
        name: str

    batch = {"x": [torch.ones(1), (torch.zeros(1), "tag")], "p": Pair(torch.ones(1), 3), "i": Item(torch.ones(1), "n")}
    moved = move_to_device(batch, torch.device("meta"))
    assert moved["x"][0].device.type == "meta" and moved["x"][1][0].device.type == "meta"
    assert moved["x"][1][1] == "tag" and isinstance(moved["p"], Pair) and moved["p"].b == 3
    assert moved["i"].x.device.type == "meta" and moved["i"].name == "n"
