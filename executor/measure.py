"""Turn per-rank profiler traces into the measured `specs.Timeline`, a collective ledger and
iteration statistics.

Sources, per rank:

- the Chrome trace of ``torch.profiler`` (reference/torch-distributed-on-cpu.md §6). Named
  ranges (``user_annotation``) give the compute phases: ``paraplan/step {i}`` around each
  training step, ``paraplan/forward mb{m} c{c}``, ``paraplan/backward mb{m} c{c}`` and
  ``paraplan/optimizer``. Collectives run on gloo's worker threads as ``gloo:all_reduce``,
  ``gloo:all_gather``, ``gloo:all_to_all`` (point-to-point ``gloo:send``/``gloo:recv`` on
  the calling thread), or on the GPU as ``nccl...`` kernels. Forward and backward phases go
  on the ``compute`` lane, the optimizer step on the ``optimizer`` lane (where the cost
  model's predicted timeline puts it, so the two align). Absolute time is
  ``baseTimeNanoseconds / 1000 + ts`` microseconds: one clock for every rank of a host.
- the flight recorder of torch.distributed (``TORCH_FR_BUFFER_SIZE``), which logs each
  collective with its process group, sizes and dtype, in issue order. Trace events carry
  no process group, so each executed collective is matched to the first unmatched flight
  record of the same operation created no later than it started. gloo runs a
  reduce-scatter as an all-reduce; a record created inside a ``c10d`` or functional
  ``reduce_scatter`` call is relabelled ``reduce_scatter``.

Process groups are named after the parallel axes they serve (``tp``, ``dp-cp``, ...; the
caller passes a ``{process group name: labels}`` map, see `group_labels` and
`choose_label`) and each label sits on one lane: dp, edp, the whole world and any
dp-containing group on ``dp``; ep on ``ep``; cp on ``cp``; pp and the tied-embedding group
on ``pp``; tp and etp on ``tp``. A group serving several axes is resolved per collective:
all-to-all is ep, collectives issued by DTensor or autograd functional collectives are
model parallel, the rest (``c10d`` calls, DDP's reducer) data parallel. gloo's flight
recorder skips point-to-point ops, so a send or recv goes to ``cp`` when it runs inside a
forward/backward range of a context-parallel plan and to ``pp`` otherwise.

Bytes follow the nccl-tests convention: the whole buffer (all-reduce and all-to-all input,
all-gather output, reduce-scatter input, the tensor of a send or recv). A send or recv on
gloo has no flight record, so its bytes are known only when the trace records shapes
(``record_shapes``) and are 0 otherwise. Ledger entries are
per rank and per iteration: ``{op, group, bytes, count}`` with ``bytes`` the total of the
``count`` calls.
"""

from __future__ import annotations

import re
from collections import defaultdict, deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from specs.timeline import Timeline, TimelineEvent

STEP_RANGE = re.compile(r"^paraplan/step (\d+)$")
"""Name of the range the training loop puts around each step."""
PHASE_RANGE = re.compile(r"^paraplan/(forward|backward|recompute) mb(\d+) c(\d+)$")
"""Per-microbatch, per-chunk compute ranges of the engine."""
OPTIMIZER_RANGE = "paraplan/optimizer"
"""Range of the optimizer step."""
COMPUTE_KINDS = ("forward", "backward", "recompute", "optimizer")
"""Event kinds of the named compute ranges."""
TIMELINE_COMM_KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send", "recv")
"""Communication kinds the Timeline schema has; others (broadcast, barrier) stay in the
ledger only."""
DTYPE_BYTES = {
    "Float": 4,
    "Double": 8,
    "Half": 2,
    "BFloat16": 2,
    "Long": 8,
    "Int": 4,
    "Short": 2,
    "Char": 1,
    "Byte": 1,
    "Bool": 1,
    "Float8_e4m3fn": 1,
    "Float8_e5m2": 1,
}
"""Bytes per element of the dtype names the flight recorder writes."""
TRACE_TYPE_BYTES = {"float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, "long int": 8}
"""Bytes per element of the ``Input type`` names in profiler traces."""
_P2P = ("send", "recv")


@dataclass(frozen=True, kw_only=True, slots=True)
class RankEvent:
    """One event of one rank on the absolute clock (seconds since the epoch)."""

    lane: str
    """Timeline lane."""
    name: str
    """Display name, e.g. ``F mb0 c0`` or ``dp all_reduce``."""
    kind: str
    """forward/backward/recompute/optimizer, or the collective's operation."""
    start_s: float
    """Absolute start, seconds."""
    duration_s: float
    """Duration, seconds."""
    microbatch: int | None = None
    """Microbatch of a compute phase."""
    chunk: int | None = None
    """Model chunk of a compute phase."""
    bytes: int = 0
    """Message bytes of a collective (see the module doc)."""
    group: str | None = None
    """Group label of a collective, e.g. ``tp``."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RankTrace:
    """What one rank's profiled window held, reduced to what the merge needs (small, so it
    can travel between ranks)."""

    rank: int
    """Global rank."""
    steps: Mapping[int, tuple[float, float]]
    """Training step -> (absolute start, absolute end) in seconds."""
    events: tuple[RankEvent, ...]
    """Compute phases and collectives inside the window."""
    memory_peak_bytes: int
    """Highest allocator total the profiler's memory events reported (0 without them)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class _Exec:
    """An executed collective found in the trace."""

    op: str
    start_s: float
    duration_s: float
    numel_bytes: int = 0
    inside_compute: bool = False


# ---- names -------------------------------------------------------------------------------


def op_of(name: str) -> str | None:
    """Operation of a trace or flight-record name (``gloo:all_reduce``,
    ``ncclDevKernel_AllGather_RING_LL``, ``c10d::_reduce_scatter_base_``); None if not a
    collective."""
    low = name.lower().replace("_", "")
    for op, keys in (
        ("reduce_scatter", ("reducescatter",)),
        ("all_gather", ("allgather",)),
        ("all_to_all", ("alltoall",)),
        ("all_reduce", ("allreduce",)),
        ("broadcast", ("broadcast",)),
        ("barrier", ("barrier",)),
        ("send", ("send",)),
        ("recv", ("recv",)),
    ):
        if any(k in low for k in keys):
            return op
    return None


def lane_of(group: str) -> str:
    """Timeline lane of a group label (see the module doc)."""
    axes = set(group.replace("_", "-").split("-"))
    for lane, members in (
        ("dp", {"dp", "edp", "world"}),
        ("ep", {"ep"}),
        ("cp", {"cp"}),
        ("pp", {"pp", "embedding"}),
    ):
        if axes & members:
            return lane
    return "tp"


def group_labels(names: Iterable[str]) -> tuple[str, ...]:
    """Labels of one process group from the axis names it serves (``dp_cp`` -> ``dp-cp``).

    DeviceMesh reuses one process group for every axis that spans the same ranks (with
    cp = 2 on 2 ranks, cp, dp_cp and tp_cp are all the default group), so a group can
    carry several labels; `choose_label` picks one per collective.
    """
    labels = tuple(dict.fromkeys(name.replace("_", "-") for name in names))
    return labels or ("world",)


def choose_label(labels: Sequence[str], op: str, *, data_parallel: bool) -> str:
    """The label of one collective on a group with these ``labels``.

    All-to-all is expert traffic (a label with ep). Data-parallel traffic (gradient
    reduction, parameter gathers, the loss: issued through ``c10d`` ops or DDP's reducer)
    prefers dp-cp, then edp, then dp, Megatron's gradient groups; model-parallel traffic
    (DTensor and autograd functional collectives) prefers a label without dp or ep.
    """

    def axes(label: str) -> set[str]:
        return set(label.split("-"))

    if op == "all_to_all":
        preferred = [label for label in labels if "ep" in axes(label)]
    elif data_parallel:
        order = ("dp-cp", "edp", "dp")
        preferred = sorted((lb for lb in labels if lb in order), key=order.index)
    else:
        preferred = [label for label in labels if not axes(label) & {"dp", "edp", "ep"}]
    return (preferred or list(labels) or ["world"])[0]


# ---- one rank ----------------------------------------------------------------------------


def rank_trace(
    trace: Mapping[str, Any],
    *,
    rank: int,
    flight_records: Sequence[Mapping[str, Any]],
    group_labels: Mapping[str, str | Sequence[str]],
    context_parallel: bool,
) -> RankTrace:
    """Reduce one rank's Chrome trace (and its flight records) to a `RankTrace`."""
    base_s = float(trace.get("baseTimeNanoseconds", 0)) / 1e9
    spans = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X" and "dur" in e]

    def start(e: Mapping[str, Any]) -> float:
        return base_s + float(e["ts"]) / 1e6

    steps: dict[int, tuple[float, float]] = {}
    compute: list[RankEvent] = []
    for e in spans:
        name = e.get("name", "")
        if m := STEP_RANGE.match(name):
            steps[int(m.group(1))] = (start(e), start(e) + e["dur"] / 1e6)
        elif (event := _compute_event(name, start(e), e["dur"] / 1e6)) is not None:
            compute.append(event)
    launches = [
        (start(e), start(e) + e["dur"] / 1e6, e["name"])
        for e in spans
        if e.get("cat") == "cpu_op" and e["name"].startswith(("c10d::", "_c10d_functional"))
    ]
    executed = _executed_collectives(spans, start, compute)
    # Records from before the profiled window (engine build, earlier steps) cannot match.
    window_ns = min((start(e) for e in spans), default=0.0) * 1e9
    recent = [r for r in flight_records if r.get("time_created_ns", 0) >= window_ns]
    comm = _label_collectives(
        executed, recent, launches, group_labels, context_parallel=context_parallel
    )
    memory = [
        int(e["args"].get("Total Allocated", 0))
        for e in trace.get("traceEvents", [])
        if e.get("name") == "[memory]" and "args" in e
    ]
    return RankTrace(
        rank=rank,
        steps=steps,
        events=tuple(sorted(compute + comm, key=lambda ev: ev.start_s)),
        memory_peak_bytes=max(memory, default=0),
    )


def _compute_event(name: str, start_s: float, duration_s: float) -> RankEvent | None:
    if name == OPTIMIZER_RANGE:
        return RankEvent(
            lane="optimizer",
            name="optimizer",
            kind="optimizer",
            start_s=start_s,
            duration_s=duration_s,
        )
    m = PHASE_RANGE.match(name)
    if m is None:
        return None
    kind, mb, chunk = m.group(1), int(m.group(2)), int(m.group(3))
    return RankEvent(
        lane="compute",
        name=f"{kind[0].upper()} mb{mb} c{chunk}",
        kind=kind,
        start_s=start_s,
        duration_s=duration_s,
        microbatch=mb,
        chunk=chunk,
    )


def _executed_collectives(
    spans: Sequence[Mapping[str, Any]], start: Any, compute: Sequence[RankEvent]
) -> list[_Exec]:
    """gloo worker/p2p ranges and NCCL kernels, in start order."""
    phases = [(c.start_s, c.start_s + c.duration_s) for c in compute if c.kind != "optimizer"]
    found = []
    for e in spans:
        name = e.get("name", "")
        is_gloo = name.startswith("gloo:") and e.get("cat") == "user_annotation"
        is_nccl = e.get("cat") == "kernel" and name.lower().startswith("nccl")
        op = op_of(name) if (is_gloo or is_nccl) else None
        if is_nccl and "Collective name" in e.get("args", {}):
            # NCCL runs all-to-all as SendRecv kernels; the profiler names the collective.
            op = op_of(str(e["args"]["Collective name"])) or op
        if op is None:
            continue
        t0 = start(e)
        found.append(
            _Exec(
                op=op,
                start_s=t0,
                duration_s=e["dur"] / 1e6,
                numel_bytes=_bytes_from_args(e.get("args", {})),
                inside_compute=any(a <= t0 <= b for a, b in phases),
            )
        )
    return sorted(found, key=lambda x: x.start_s)


def _bytes_from_args(args: Mapping[str, Any]) -> int:
    """Message bytes from a trace event's own arguments, when the profiler recorded them
    (``record_shapes`` gives ``Input Dims``; NCCL kernels carry ``In msg nelems``)."""
    if "In msg nelems" in args:
        elem = DTYPE_BYTES.get(str(args.get("dtype", "Float")), 4)
        return int(args["In msg nelems"]) * elem
    dims, types = args.get("Input Dims"), args.get("Input type") or ["float"]
    if dims and isinstance(dims[0], list) and all(isinstance(d, int) for d in dims[0]):
        elem = TRACE_TYPE_BYTES.get(str(types[0]), 4)
        return int(np.prod(dims[0], dtype=np.int64)) * elem
    return 0


def _label_collectives(
    executed: Sequence[_Exec],
    records: Sequence[Mapping[str, Any]],
    launches: Sequence[tuple[float, float, str]],
    group_labels: Mapping[str, str | Sequence[str]],
    *,
    context_parallel: bool,
) -> list[RankEvent]:
    # Each operation's records in issue order; an execution takes the oldest of its kind.
    pending: dict[str, deque[Mapping[str, Any]]] = defaultdict(deque)
    for record in sorted(records, key=lambda r: r.get("time_created_ns", 0)):
        op = op_of(str(record.get("profiling_name", "")))
        if op is not None and not record.get("is_p2p"):
            pending[op].append(record)
    slack_s = 1e-3  # a record is stamped just before its work is queued
    events = []
    for ex in executed:
        op, group, size = ex.op, None, ex.numel_bytes
        queue = pending[op]
        if op in _P2P:
            group = "cp" if context_parallel and ex.inside_compute else "pp"
        elif queue and queue[0].get("time_created_ns", 0) / 1e9 <= ex.start_s + slack_s:
            record = queue.popleft()
            pg = record.get("process_group", ["", ""])
            created_s = record.get("time_created_ns", 0) / 1e9
            launch = next((name for a, b, name in launches if a <= created_s <= b), "")
            if op_of(launch) == "reduce_scatter":
                op = "reduce_scatter"
            labels = group_labels.get(str(pg[0]), _label_from_desc(str(pg[1])))
            group = choose_label(
                [labels] if isinstance(labels, str) else labels,
                op,
                data_parallel=not launch.startswith("_c10d_functional"),
            )
            size = _record_bytes(record, op) or size
        events.append(
            RankEvent(
                lane=lane_of(group or "world"),
                name=f"{group or 'world'} {op}",
                kind=op,
                start_s=ex.start_s,
                duration_s=ex.duration_s,
                bytes=size,
                group=group or "world",
            )
        )
    return events


def _record_bytes(record: Mapping[str, Any], op: str) -> int:
    sizes = record.get("output_sizes" if op == "all_gather" else "input_sizes") or []
    dtypes = record.get("output_dtypes" if op == "all_gather" else "input_dtypes") or []
    total = 0
    for shape, dtype in zip(sizes, dtypes, strict=False):
        total += int(np.prod(shape)) * DTYPE_BYTES.get(str(dtype), 4) if shape else 0
    return total


def _label_from_desc(desc: str) -> str:
    """A label from a DeviceMesh group description (``mesh_dp_cp`` -> ``dp-cp``)."""
    name = desc.removeprefix("mesh_")
    return name.replace("_", "-") if name and name not in ("default_pg", "undefined") else "world"


# ---- all ranks ---------------------------------------------------------------------------


def build_timeline(
    traces: Sequence[RankTrace], *, step: int, iteration_time_s: float, note: str = ""
) -> Timeline:
    """The measured `Timeline` of one training step on every rank that profiled it.

    Times are seconds from the earliest start of that step over the ranks; an event
    belongs to the step when it starts inside the rank's step range.
    """
    windows = {t.rank: t.steps[step] for t in traces if step in t.steps}
    if not windows:
        return Timeline(source="measured", iteration_time_s=iteration_time_s, note=note)
    t0 = min(start for start, _ in windows.values())
    events = []
    for trace in traces:
        if trace.rank not in windows:
            continue
        lo, hi = windows[trace.rank]
        for ev in trace.events:
            if not lo <= ev.start_s <= hi:
                continue
            if ev.kind not in COMPUTE_KINDS + TIMELINE_COMM_KINDS:
                continue
            events.append(
                TimelineEvent(
                    rank=trace.rank,
                    lane=ev.lane,  # type: ignore[arg-type]
                    name=ev.name,
                    kind=ev.kind,  # type: ignore[arg-type]
                    start_s=ev.start_s - t0,
                    duration_s=ev.duration_s,
                    microbatch=ev.microbatch,
                    chunk=ev.chunk,
                    bytes=ev.bytes,
                    group=ev.group,
                )
            )
    return Timeline(
        source="measured",
        events=tuple(events),
        iteration_time_s=iteration_time_s,
        ranks_shown=tuple(sorted(windows)),
        note=note,
    )


def collective_ledger(traces: Sequence[RankTrace], *, steps: Sequence[int]) -> list[dict[str, Any]]:
    """``[{op, group, bytes, count}]`` per rank per iteration, averaged over the ranks and
    the given steps (collectives of every kind, broadcasts and barriers included)."""
    sums: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    seen = 0
    for trace in traces:
        for step in steps:
            if step not in trace.steps:
                continue
            seen += 1
            lo, hi = trace.steps[step]
            for ev in trace.events:
                if ev.kind not in COMPUTE_KINDS and lo <= ev.start_s <= hi:
                    entry = sums[(ev.kind, ev.group or "world")]
                    entry[0] += ev.bytes
                    entry[1] += 1
    if not seen:
        return []
    return [
        {"op": op, "group": group, "bytes": b / seen, "count": c / seen}
        for (op, group), (b, c) in sorted(sums.items(), key=lambda kv: (kv[0][1], kv[0][0]))
    ]


@dataclass(frozen=True, kw_only=True, slots=True)
class StepStats:
    """Throughput figures of a run's measured steps."""

    p50_s: float
    """Median iteration time, seconds."""
    p95_s: float
    """95th percentile iteration time (linear interpolation), seconds."""
    tokens_per_s: float
    """Tokens per iteration over the median iteration time, whole job."""
    mfu: float | None
    """Model FLOPs utilization: model FLOPs per iteration / (median time x ranks x peak
    FLOP/s per rank); None when the peak or the model FLOPs are not given."""


def step_stats(
    times_s: Sequence[float],
    *,
    tokens_per_iteration: int,
    world_size: int,
    model_flops_per_iteration: float | None,
    peak_flops_per_rank: float | None,
) -> StepStats:
    """p50, p95, tokens/s and MFU of the iteration times ``times_s`` (at least one)."""
    p50 = float(np.percentile(times_s, 50))
    p95 = float(np.percentile(times_s, 95))
    mfu = None
    if model_flops_per_iteration and peak_flops_per_rank:
        mfu = model_flops_per_iteration / (p50 * world_size * peak_flops_per_rank)
    return StepStats(p50_s=p50, p95_s=p95, tokens_per_s=tokens_per_iteration / p50, mfu=mfu)
