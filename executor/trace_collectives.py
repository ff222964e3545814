"""Collectives of one rank's profiler trace: which operation each one ran
(`executed_collectives`, `op_of`), on which process group, lane and with how many bytes
(`label_collectives`), for `executor.measure.rank_trace`.

Executed collectives come from the Chrome trace of ``torch.profiler``: they run on gloo's
worker threads as ``gloo:all_reduce``, ``gloo:all_gather``, ``gloo:all_to_all``
(point-to-point ``gloo:send``/``gloo:recv`` on the calling thread), or on the GPU as
``nccl...`` kernels.

The flight recorder of torch.distributed (``TORCH_FR_BUFFER_SIZE``) logs each collective
with its process group, sizes and dtype, in issue order. Trace events carry no process
group, so each executed collective is matched to the first unmatched flight record of the
same operation created no later than it started. gloo runs a reduce-scatter as an
all-reduce; a record created inside a ``c10d`` or functional ``reduce_scatter`` call is
relabelled ``reduce_scatter``.

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
(``record_shapes``) and are 0 otherwise.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from executor.rank_event import RankEvent

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
class ExecutedCollective:
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


def executed_collectives(
    spans: Sequence[Mapping[str, Any]], start: Any, compute: Sequence[RankEvent]
) -> list[ExecutedCollective]:
    """gloo worker/p2p ranges and NCCL kernels of the trace's complete events ``spans``, in
    start order. ``start`` maps an event to its absolute start in seconds; an execution that
    starts inside a forward/backward range of ``compute`` is marked ``inside_compute``."""
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
            ExecutedCollective(
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


def label_collectives(
    executed: Sequence[ExecutedCollective],
    records: Sequence[Mapping[str, Any]],
    launches: Sequence[tuple[float, float, str]],
    group_labels: Mapping[str, str | Sequence[str]],
    *,
    context_parallel: bool,
) -> list[RankEvent]:
    """One `RankEvent` per executed collective, with its operation, group label, lane and
    bytes from the flight ``records`` (module docstring). ``launches`` are the (start, end,
    name) of the ``c10d`` and functional-collective calls, which tell a reduce-scatter run
    as an all-reduce and model-parallel from data-parallel traffic; ``group_labels`` maps a
    process group name to its labels (`group_labels`)."""
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
