"""From profiler traces and flight records to the Timeline, the ledger and step statistics.

Most tests feed hand-made traces in the format torch 2.13 writes (reference
torch-distributed-on-cpu.md §6); one spawned world checks that format on real traces.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile, record_function

from executor.launch import RankInfo, launch
from executor.measure import (
    RankTrace,
    build_timeline,
    collective_ledger,
    rank_trace,
    step_stats,
)
from executor.trace_collectives import choose_label, group_labels, lane_of, op_of
from specs import serde
from specs.timeline import Timeline

REPO = Path(__file__).resolve().parents[2]
BASE_NS = 1_700_000_000 * 10**9


@pytest.fixture(autouse=True)
def _ranks_can_import_this_module(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(REPO))


def _span(name: str, ts_us: float, dur_us: float, cat: str = "user_annotation", tid: int = 1):
    return {"ph": "X", "cat": cat, "name": name, "ts": ts_us, "dur": dur_us, "tid": tid, "args": {}}


def _record(op: str, pg: tuple[str, str], created_us: float, numel: int, **kw: Any):
    out = kw.pop("out", [numel])
    return {
        "profiling_name": f"gloo:{op}",
        "process_group": list(pg),
        "time_created_ns": BASE_NS + int(created_us * 1000),
        "input_sizes": [[numel]],
        "input_dtypes": ["Float"],
        "output_sizes": [out],
        "output_dtypes": ["Float"],
        "is_p2p": False,
    } | kw


def _trace(events: list[dict[str, Any]], base_ns: int = BASE_NS) -> dict[str, Any]:
    return {"baseTimeNanoseconds": base_ns, "traceEvents": events}


# ---- names ---------------------------------------------------------------------------------


def test_operation_names_from_every_source() -> None:
    assert op_of("gloo:all_reduce") == "all_reduce"
    assert op_of("c10d::_reduce_scatter_base_") == "reduce_scatter"
    assert op_of("_c10d_functional::all_gather_into_tensor") == "all_gather"
    assert op_of("ncclDevKernel_AllGather_RING_LL") == "all_gather"
    assert op_of("ncclDevKernel_SendRecv") == "send"
    assert op_of("c10d::alltoall_base_") == "all_to_all"
    assert op_of("aten::mm") is None


def test_group_labels_and_lanes() -> None:
    assert group_labels(["dp_cp", "tp_cp", "dp_cp"]) == ("dp-cp", "tp-cp")
    assert group_labels([]) == ("world",)
    # cp = 2 on 2 ranks: one process group serves cp, dp_cp, tp_cp and edp.
    shared = group_labels(["cp", "dp_cp", "tp_cp", "edp"])
    assert choose_label(shared, "all_reduce", data_parallel=True) == "dp-cp"
    assert choose_label(shared, "all_gather", data_parallel=False) == "cp"
    # dp = ep = world: the dp group also carries the token all-to-all.
    moe = group_labels(["dp", "dp_cp", "ep", "edp"])
    assert choose_label(moe, "all_to_all", data_parallel=True) == "ep"
    assert choose_label(moe, "all_reduce", data_parallel=True) == "dp-cp"
    assert choose_label(("tp", "tp-cp"), "all_reduce", data_parallel=True) == "tp"
    assert [lane_of(g) for g in ("tp", "dp-cp", "edp", "ep", "cp", "pp", "embedding")] == [
        "tp",
        "dp",
        "dp",
        "ep",
        "cp",
        "pp",
        "pp",
    ]
    assert lane_of("world") == "dp"


# ---- one rank -----------------------------------------------------------------------------


def _rank0_trace() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Step 7 of a TP2 x DP2 rank: forward, a TP all-reduce, backward, a DP reduce-scatter
    (run by gloo as an all-reduce), the optimizer, and a pipeline send."""
    events = [
        _span("paraplan/step 7", 1000, 900),
        _span("paraplan/forward mb0 c0", 1010, 200),
        _span("paraplan/backward mb0 c0", 1300, 300),
        _span("paraplan/optimizer", 1700, 100),
        _span("c10d::_reduce_scatter_base_", 1610, 5, cat="cpu_op"),
        _span("gloo:all_reduce", 1100, 50, tid=9),
        _span("gloo:all_reduce", 1620, 60, tid=9),
        _span("gloo:send", 1850, 10),
        _span("aten::mm", 1020, 10, cat="cpu_op"),
        {"ph": "i", "name": "[memory]", "ts": 1050, "args": {"Total Allocated": 5000}},
        {"ph": "i", "name": "[memory]", "ts": 1400, "args": {"Total Allocated": 9000}},
    ]
    records = [
        _record("all_reduce", ("3", "mesh_tp"), 1099, 256),
        _record("all_reduce", ("5", "mesh_dp_cp"), 1612, 1024),
    ]
    return _trace(events), records


def test_rank_trace_labels_phases_collectives_and_memory() -> None:
    trace, records = _rank0_trace()
    rt = rank_trace(
        trace,
        rank=0,
        flight_records=records,
        group_labels={"3": "tp", "5": "dp"},
        context_parallel=False,
    )
    base_s = BASE_NS / 1e9
    assert rt.steps == {7: pytest.approx((base_s + 1000e-6, base_s + 1900e-6))}
    assert rt.memory_peak_bytes == 9000
    kinds = [(e.lane, e.kind, e.group, e.bytes) for e in rt.events]
    assert kinds == [
        ("compute", "forward", None, 0),
        ("tp", "all_reduce", "tp", 256 * 4),
        ("compute", "backward", None, 0),
        ("dp", "reduce_scatter", "dp", 1024 * 4),  # relabelled from gloo's all_reduce
        ("optimizer", "optimizer", None, 0),
        ("pp", "send", "pp", 0),
    ]
    forward = rt.events[0]
    assert (forward.name, forward.microbatch, forward.chunk) == ("F mb0 c0", 0, 0)
    assert forward.duration_s == pytest.approx(200e-6)


def test_flight_records_match_in_order_by_operation() -> None:
    events = [
        _span("paraplan/step 0", 50, 100),
        _span("gloo:all_gather", 100, 10, tid=5),
        _span("gloo:all_reduce", 105, 10, tid=6),
    ]
    records = [
        _record("all_gather", ("9", "mesh_tp"), 20, 8),  # before the window: never matched
        _record("all_reduce", ("1", "mesh_dp"), 90, 10),
        _record("all_gather", ("2", "mesh_tp"), 95, 8, out=[2, 8]),
    ]
    rt = rank_trace(
        _trace(events), rank=0, flight_records=records, group_labels={}, context_parallel=False
    )
    # Each execution takes the record of its own operation; all-gather counts its output.
    assert [(e.kind, e.group, e.bytes) for e in rt.events] == [
        ("all_gather", "tp", 64),
        ("all_reduce", "dp", 40),
    ]


def test_point_to_point_inside_compute_is_context_parallel() -> None:
    events = [_span("paraplan/forward mb0 c0", 0, 100), _span("gloo:recv", 50, 5)]
    rt = rank_trace(
        _trace(events), rank=0, flight_records=[], group_labels={}, context_parallel=True
    )
    assert [(e.lane, e.kind) for e in rt.events if e.lane != "compute"] == [("cp", "recv")]


# ---- all ranks -----------------------------------------------------------------------------


def _two_ranks() -> list[RankTrace]:
    trace0, records0 = _rank0_trace()
    rt0 = rank_trace(
        trace0,
        rank=0,
        flight_records=records0,
        group_labels={"3": "tp", "5": "dp"},
        context_parallel=False,
    )
    # Rank 1's profiler clock starts 2 ms later; its step begins 100 us after rank 0's.
    events1 = [
        _span("paraplan/step 7", -900, 800),
        _span("paraplan/forward mb0 c0", -890, 300),
        _span("gloo:all_reduce", -800, 50),
    ]
    records1 = [_record("all_reduce", ("3", "mesh_tp"), 2000 - 801, 256)]
    rt1 = rank_trace(
        _trace(events1, BASE_NS + 2_000_000),
        rank=1,
        flight_records=records1,
        group_labels={"3": "tp"},
        context_parallel=False,
    )
    return [rt0, rt1]


def test_timeline_merges_ranks_on_one_clock() -> None:
    timeline = build_timeline(_two_ranks(), step=7, iteration_time_s=0.5, note="n")
    assert timeline.source == "measured" and timeline.ranks_shown == (0, 1)
    first = {r: min(e.start_s for e in timeline.for_rank(r)) for r in (0, 1)}
    # Absolute epoch seconds in float64 resolve about 0.25 us.
    assert first[0] == pytest.approx(10e-6, abs=1e-6)
    assert first[1] == pytest.approx(110e-6, abs=1e-6)  # (2000 - 890) - 1000 us
    assert {e.kind for e in timeline.events} <= {
        "forward",
        "backward",
        "optimizer",
        "all_reduce",
        "reduce_scatter",
        "send",
    }
    # The schema round trip and the Chrome export both accept what was built.
    assert serde.loads(Timeline, serde.dumps(timeline)) == timeline
    assert len(timeline.to_chrome_trace()["traceEvents"]) > len(timeline.events)


def test_ledger_is_per_rank_per_iteration() -> None:
    ledger = collective_ledger(_two_ranks(), steps=[7])
    as_dict = {(r["op"], r["group"]): (r["bytes"], r["count"]) for r in ledger}
    # tp all-reduce: 1 call of 1 KiB on each of the 2 ranks -> 1 call, 1 KiB per rank.
    assert as_dict[("all_reduce", "tp")] == (1024.0, 1.0)
    # Only rank 0 ran the reduce-scatter and the send: half a call per rank.
    assert as_dict[("reduce_scatter", "dp")] == (2048.0, 0.5)
    assert as_dict[("send", "pp")] == (0.0, 0.5)
    assert collective_ledger(_two_ranks(), steps=[99]) == []


def test_step_stats_percentiles_throughput_and_mfu() -> None:
    stats = step_stats(
        [1.0, 2.0, 3.0, 4.0, 10.0],
        tokens_per_iteration=4096,
        world_size=8,
        model_flops_per_iteration=8e15,
        peak_flops_per_rank=1e15,
    )
    assert stats.p50_s == 3.0
    assert stats.p95_s == pytest.approx(8.8)  # numpy linear: 4 + 0.8 * (10 - 4)
    assert stats.tokens_per_s == pytest.approx(4096 / 3)
    assert stats.mfu == pytest.approx(8e15 / (3.0 * 8 * 1e15))
    no_peak = step_stats(
        [1.0],
        tokens_per_iteration=1,
        world_size=1,
        model_flops_per_iteration=1.0,
        peak_flops_per_rank=None,
    )
    assert no_peak.mfu is None


# ---- real traces ---------------------------------------------------------------------------


def _profiled_collectives(info: RankInfo, out_dir: str) -> RankTrace:
    tp = dist.new_group([0, 1], group_desc="mesh_tp")
    x = torch.ones(1000)
    with (
        profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof,
        record_function("paraplan/step 0"),
    ):
        with record_function("paraplan/forward mb0 c0"):
            dist.all_reduce(x, group=tp)
            y = torch.randn(256, 256) @ torch.randn(256, 256)
        out = torch.empty(500)
        dist.reduce_scatter_tensor(out, x)
        dist.all_gather_into_tensor(torch.empty(2000), x)
        if info.rank == 0:
            dist.send(y, 1)
        else:
            dist.recv(y, 0)
    path = Path(out_dir) / f"rank{info.rank}.json"
    prof.export_chrome_trace(str(path))
    records = json.loads(torch._C._distributed_c10d._dump_fr_trace_json(True, False))["entries"]
    return rank_trace(
        json.loads(path.read_text()),
        rank=info.rank,
        flight_records=records,
        group_labels={tp.group_name: "tp", "0": "dp"},
        context_parallel=False,
    )


@pytest.mark.slow
def test_real_gloo_traces_give_groups_kinds_and_bytes(tmp_path: Path) -> None:
    traces = launch(_profiled_collectives, (str(tmp_path),), world_size=2, timeout_s=30)
    for rank, rt in traces.items():
        comm = [(e.lane, e.kind, e.group, e.bytes) for e in rt.events if e.microbatch is None]
        p2p = ("pp", "send" if rank == 0 else "recv", "pp", 0)
        assert comm == [
            ("tp", "all_reduce", "tp", 4000),
            ("dp", "reduce_scatter", "dp", 4000),
            ("dp", "all_gather", "dp", 8000),
            p2p,
        ]
        assert rt.memory_peak_bytes >= 3 * 256 * 256 * 4  # two inputs and the product
        assert 0 in rt.steps
    timeline = build_timeline(list(traces.values()), step=0, iteration_time_s=0.1)
    assert {e.rank for e in timeline.events} == {0, 1}
    assert min(e.start_s for e in timeline.events) >= 0
