"""The collective ledger: which collectives ran, on which group, how many bytes, how often.

Both sides are counted per rank and per iteration: a timeline's communication events are
summed over its ranks and iterations and divided by both; the executor's ``metrics.json``
``collectives`` entries ({op, group, bytes, count}) are taken as already per rank and per
iteration, with ``bytes`` the total of ``count`` calls. Operation and group names are
normalized so that torch's spellings (``all_gather_into_tensor``, ``_allgather_base``,
``isend``) and the timeline's (``all_gather``, ``send``) meet, and ``dp-cp`` equals
``cp-dp``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specs.errors import SpecError
from specs.timeline import Timeline

GROUP_AXES = ("tp", "cp", "ep", "etp", "dp", "edp", "pp")
"""Megatron's rank order, used to spell a multi-axis group the same way on both sides."""
NON_COMM_KINDS = ("forward", "backward", "recompute", "optimizer", "bubble")
"""Event kinds that are not communication."""
_P2P = {"isend": "send", "irecv": "recv"}

Ledger = dict[tuple[str, str], tuple[float | None, float]]
"""(op, group) -> (bytes, calls), per rank per iteration; bytes None when the side recorded
calls of that collective but no sizes (every event or entry of it has 0 bytes)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class LedgerRow:
    """One collective (operation on a group): bytes and calls per rank per iteration."""

    op: str
    """Operation, e.g. ``all_reduce``, ``send``."""
    group: str
    """Process group, e.g. ``tp`` or ``cp-dp``."""
    predicted_bytes: float | None
    """Predicted bytes; None when the prediction has no such collective or no sizes for it."""
    measured_bytes: float | None
    """Measured bytes; None when the measurement has no such collective or no sizes for it."""
    predicted_count: float | None
    """Predicted calls."""
    measured_count: float | None
    """Measured calls."""

    @property
    def bytes_error(self) -> float | None:
        """``(predicted - measured) / measured`` of the bytes; None if a side is missing or 0."""
        if self.predicted_bytes is None or not self.measured_bytes:
            return None
        return (self.predicted_bytes - self.measured_bytes) / self.measured_bytes


def normalize_op(op: str) -> str:
    """One spelling per operation: ``allgather``/``all_gather_into_tensor`` -> ``all_gather``."""
    name = op.lower().replace("-", "_").strip("_")
    for suffix in ("_into_tensor", "_tensor", "_single", "_base", "_coalesced"):
        name = name.removesuffix(suffix)
    name = name.replace("alltoall", "all_to_all").replace("reducescatter", "reduce_scatter")
    for joined in ("reduce", "gather"):
        name = name.replace(f"all{joined}", f"all_{joined}")
    return _P2P.get(name, name)


def normalize_group(group: str) -> str:
    """One spelling per group: axes in Megatron's rank order (``dp-cp`` -> ``cp-dp``)."""
    axes = [a for a in group.lower().replace("_", "-").split("-") if a]
    order = {a: i for i, a in enumerate(GROUP_AXES)}
    return "-".join(sorted(axes, key=lambda a: (order.get(a, len(order)), a)))


def timeline_ledger(timeline: Timeline, *, num_ranks: int, num_iterations: int) -> Ledger:
    """Bytes and calls per rank per iteration of each (op, group) of a timeline.

    ``num_ranks`` and ``num_iterations`` are what the timeline holds; totals are divided by
    both. An event without a group is counted on its lane's group.
    """
    if num_ranks < 1 or num_iterations < 1:
        raise SpecError(
            f"timeline_ledger: num_ranks ({num_ranks}) and num_iterations ({num_iterations}) "
            "must be >= 1"
        )
    sums: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for e in timeline.events:
        if e.kind in NON_COMM_KINDS:
            continue
        entry = sums[(normalize_op(e.kind), normalize_group(e.group or e.lane))]
        entry[0] += e.bytes
        entry[1] += 1
    divisor = num_ranks * num_iterations
    return {key: (b / divisor if b else None, c / divisor) for key, (b, c) in sums.items()}


def metrics_ledger(collectives: Sequence[Any]) -> Ledger:
    """The executor's ``collectives`` entries ({op, group, bytes, count}) summed per key."""
    sums: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for i, entry in enumerate(collectives):
        if not isinstance(entry, Mapping) or not all(k in entry for k in ("op", "group", "bytes")):
            raise SpecError(
                f"metrics collectives[{i}] must be an object with op, group, bytes and count, "
                f"got {entry!r:.80}"
            )
        key = (normalize_op(str(entry["op"])), normalize_group(str(entry["group"])))
        sums[key][0] += float(entry["bytes"])
        sums[key][1] += float(entry.get("count", 1))
    return {key: (b if b else None, c) for key, (b, c) in sums.items()}


def join_ledgers(predicted: Ledger, measured: Ledger) -> tuple[LedgerRow, ...]:
    """Join two ledgers on (op, group), sorted by group (rank order) then op; a collective
    seen on one side only has None on the other."""
    order = {a: i for i, a in enumerate(GROUP_AXES)}
    keys = sorted(
        predicted.keys() | measured.keys(),
        key=lambda k: (order.get(k[1].split("-")[0], len(order)), k[1], k[0]),
    )
    rows = []
    for key in keys:
        p, m = predicted.get(key), measured.get(key)
        rows.append(
            LedgerRow(
                op=key[0],
                group=key[1],
                predicted_bytes=p[0] if p else None,
                measured_bytes=m[0] if m else None,
                predicted_count=p[1] if p else None,
                measured_count=m[1] if m else None,
            )
        )
    return tuple(rows)
