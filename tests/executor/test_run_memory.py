"""The CPU peak-memory measurement of `executor.run`: profiler totals and DDP buckets."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from executor.peak_memory import ddp_bucket_bytes, memory_totals


def _event(total: int, nbytes: int, ts: int) -> dict:
    args = {"Total Allocated": total, "Bytes": nbytes}
    return {"name": "[memory]", "ts": ts, "args": args}


def test_totals_are_relative_to_the_window_start() -> None:
    # 12 MB were still counted from an earlier window (optimizer state it created);
    # this window allocates 1 MB, then 2 MB, frees the 1 MB.
    carried = 12_000_000
    trace = {
        "traceEvents": [
            _event(carried + 3_000_000, 2_000_000, ts=2),
            _event(carried + 1_000_000, 1_000_000, ts=1),
            _event(carried + 2_000_000, -1_000_000, ts=3),
            {"name": "aten::add", "ts": 4},
        ]
    }
    assert memory_totals(trace) == [1_000_000, 3_000_000, 2_000_000]
    assert memory_totals({"traceEvents": []}) == []


def _block(address: int, nbytes: int, ts: int) -> dict:
    args = {"Total Allocated": 0, "Bytes": nbytes, "Addr": address}
    return {"name": "[memory]", "ts": ts, "args": args}


def test_a_block_allocated_again_at_a_live_address_ends_the_one_there() -> None:
    # The profiler missed the free of the first 1 MB block at address 10 (as it does for
    # some collective buffers on gloo); the allocator handing out 10 again shows it freed.
    trace = {
        "traceEvents": [
            _block(10, 1_000_000, ts=1),
            _block(20, 2_000_000, ts=2),
            _block(10, 1_000_000, ts=3),
            _block(20, -2_000_000, ts=4),
            _block(99, -5_000_000, ts=5),  # allocated before the window: not counted
            _block(10, -1_000_000, ts=6),
        ]
    }
    assert memory_totals(trace) == [1_000_000, 3_000_000, 3_000_000, 1_000_000, 1_000_000, 0]


def test_a_second_profiled_window_does_not_count_the_first_ones_tensors_again(
    tmp_path: Path,
) -> None:
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as first:
        kept = torch.empty(2**20, dtype=torch.uint8)  # lives on past the window
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as second:
        tmp = torch.empty(2**18, dtype=torch.uint8)
        del tmp
    assert kept.numel() == 2**20
    for name, session, peak in (("first", first, 2**20), ("second", second, 2**18)):
        path = tmp_path / f"{name}.json"
        session.export_chrome_trace(str(path))
        assert max(memory_totals(json.loads(path.read_text()))) == peak


def test_ddp_buckets_are_counted_from_ddp_logging_data(one_rank_group) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(100, 200), torch.nn.Linear(200, 10))
    params_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.05)
    assert ddp_bucket_bytes(ddp) == params_bytes  # one fp32 gradient slot per parameter
    assert ddp_bucket_bytes(model) == 0
