"""Scalars the Trainer makes on the device on recurring paths (a rank's flag for a collective,
a window's batch count, an int `num_items`) are filled there by a kernel, never copied from the
host: on CUDA, `torch.tensor(x, device="cuda")` or `.to("cuda")` of a host tensor waits for the
stream. The `meta` device stands in for CUDA (the same code path), watched by a dispatch mode.
"""

from __future__ import annotations

import torch

from tests.helpers.traffic import HostDeviceTraffic
from trainer.distributed import DDP
from trainer.loops.items import item_count


def test_a_ranks_flag_and_count_are_filled_on_the_device():
    strategy = DDP()
    strategy.device = torch.device("meta")
    with HostDeviceTraffic() as traffic:
        flag = strategy._flag_tensor(True)
        count = strategy._host_value(7, torch.int64)
    assert traffic.seen == []
    assert flag.device.type == count.device.type == "meta" and flag.dtype == torch.int32 and count.dtype == torch.int64


def test_int_item_counts_reach_the_device_without_a_copy():
    from trainer.loops.items import _on

    counts = [item_count({"loss": None, "num_items": n}, 0) for n in (3, 5)] + [torch.tensor(2.0)]
    with HostDeviceTraffic() as traffic:
        moved = [_on(c, torch.int64, torch.device("meta")) for c in counts]
    assert traffic.seen == []
    assert all(m.device.type == "meta" and m.dtype == torch.int64 for m in moved)
    assert [int(_on(c, torch.int64, torch.device("cpu"))) for c in counts] == [3, 5, 2]
