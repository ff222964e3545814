"""Collective α-β fits from the collectives a run measured (stage 1 of `reports.calibrate`).

A measured collective event (lane tp, cp, ep or dp; kind all_reduce, all_gather,
reduce_scatter or all_to_all) carries its bytes in the nccl-tests convention (the whole
buffer, `executor.trace_collectives`) and its process-group label (``tp``, ``dp-cp``,
``world``, ...). The label and the plan give the group's ranks (`specs.layout.RankLayout`,
Megatron order) and its placement on the cluster (`costmodel.topology.place_group`), hence
the profile fit it samples: (op, group size, ``intra``) for a group inside one scale-up
domain, (op, group size, ``inter``) for one rank per domain. A group with several ranks in
each of several domains is timed by the cost model from two fits at once and is left out.

Wire time of a call: a collective ends at the same moment on every rank of its group, so
each rank's duration is the wire time plus its wait for the last rank to arrive, and the
last rank waits for nobody. The k-th call of an (op, group, bytes) key on each member rank
is one call; its wire time is the shortest of those durations.

Fit per (op, group size, placement), over every run: the median wire time per message
size, then the α-β line ``t = latency_s + x / busbw`` (``x`` = bytes · bus factor,
`profiles.lookup.bus_factor`) by non-negative least squares on relative residuals
(each size weighs the same whatever its time). The slope is fitted only when the largest
size is bandwidth-bound under the profile's fit (transfer term at least the latency), since
a slope through latency-bound sizes is noise. Otherwise, and with a single size, only the
term that dominates under the profile's fit is refitted: the latency for latency-bound
sizes, the bandwidth for one bandwidth-bound size (both scaled by the time ratio when that
size runs faster than the profile's latency alone). A key with fewer than `MIN_CALLS`
calls keeps the profile's fit.

Units: seconds (``_s``), bytes, GB/s = 1e9 bytes/s.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import nnls

from costmodel.cluster_graph import cluster_graph, place_group
from costmodel.scale_up import RankPacking
from profiles.lookup import bus_factor, collective_fit, collective_time_s
from profiles.schema import HardwareProfile
from profiles.schema_network import CollectiveFit
from reports.run_dir import RunDir
from specs.errors import SpecError
from specs.layout import DENSE_AXES, EXPERT_AXES, RankLayout
from specs.timeline import Timeline, TimelineEvent

COLLECTIVE_KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
"""Event kinds fitted here; point-to-point sends carry no bytes on gloo
(`executor.trace_collectives`) and are calibrated from the pipeline phases instead
(`reports.calibrate`)."""
MIN_CALLS = 3
"""Calls a fit needs before it is refitted; one or two calls in a profiled step (a loss
all-reduce, one gradient bucket) are as much scheduling noise as wire time on a busy host."""
FitKey = tuple[str, int, str]
"""(op, group size, placement) of a `CollectiveFit`."""


@dataclass(frozen=True, kw_only=True, slots=True)
class CommSample:
    """The wire time of one measured collective call."""

    op: str
    """Collective, e.g. ``all_reduce``."""
    group_size: int
    """Ranks in its group."""
    placement: str
    """``intra`` or ``inter`` (see the module docstring)."""
    size_bytes: float
    """Message size, nccl-tests convention."""
    wire_s: float
    """Shortest duration of the call over the group's measured ranks, seconds."""

    @property
    def key(self) -> FitKey:
        """The profile fit this call samples."""
        return (self.op, self.group_size, self.placement)


def group_axes(label: str) -> str | None:
    """`RankLayout` axes of a measured group label (``world`` is every dense axis); None for
    a label that names no group of the layout."""
    if label == "world":
        return "-".join(DENSE_AXES)
    names = [name for name in label.split("-") if name]
    if not names or len(set(names)) != len(names):
        return None
    if set(names) <= set(DENSE_AXES) or set(names) <= set(EXPERT_AXES):
        return "-".join(names)
    return None


def _calls_by_key(timeline: Timeline) -> dict[tuple[str, str, int], dict[int, list[float]]]:
    """(op, label, bytes) -> rank -> durations in start order."""
    calls: dict[tuple[str, str, int], dict[int, list[float]]] = defaultdict(
        lambda: defaultdict(list)
    )
    events: Iterable[TimelineEvent] = sorted(timeline.events, key=lambda e: e.start_s)
    for e in events:
        if e.kind in COLLECTIVE_KINDS and e.bytes > 0 and e.group:
            calls[e.kind, e.group, e.bytes][e.rank].append(e.duration_s)
    return calls


def comm_samples(run: RunDir, profile: HardwareProfile) -> list[CommSample]:
    """Wire-time samples of every measured collective of ``run`` that one fit describes."""
    if run.measured is None:
        return []
    plan, cluster = run.bundle.plan, run.bundle.cluster
    layout = RankLayout.from_plan(plan)
    graph = cluster_graph(profile, layout.world_size, RankPacking.of(cluster))
    samples = []
    for (op, label, size), by_rank in _calls_by_key(run.measured).items():
        axes = group_axes(label)
        if axes is None:
            continue
        for members in layout.groups(axes):
            place = place_group(graph, members, axes)
            if place.size < 2 or (place.num_domains > 1 and place.ranks_per_domain > 1):
                continue
            lists = [by_rank[r] for r in members if r in by_rank]
            for k in range(min((len(durations) for durations in lists), default=0)):
                samples.append(
                    CommSample(
                        op=op,
                        group_size=place.size,
                        placement=place.placement,
                        size_bytes=float(size),
                        wire_s=min(durations[k] for durations in lists),
                    )
                )
    return samples


def _base_fit(profile: HardwareProfile, key: FitKey) -> CollectiveFit | None:
    op, size, placement = key
    try:
        return collective_fit(profile, op, size, placement)
    except SpecError:
        return None


def _bandwidth_visible(largest_x: float, base: CollectiveFit | None) -> bool:
    """True when the largest message reaches the bandwidth-bound range of the base fit (its
    transfer term at least its latency); below it a slope fitted to noise would extrapolate
    to absurd large-message times."""
    if base is None:
        return True
    return largest_x / (base.busbw_GBps * 1e9) >= base.latency_s


def fit_alpha_beta(
    op: str, group_size: int, points: Sequence[tuple[float, float]], base: CollectiveFit | None
) -> tuple[float, float] | None:
    """(latency_s, busbw_GBps) of ``op`` over ``group_size`` ranks from (size_bytes,
    seconds) points, one per message size (method in the module docstring); None when the
    points cannot fix a fit (a single size and no base fit to scale)."""
    factor = bus_factor(op, group_size)
    x = np.array([size * factor for size, _ in points])
    t = np.array([seconds for _, seconds in points])
    if len(points) >= 2 and np.ptp(x) > 0 and _bandwidth_visible(float(x.max()), base):
        weights = 1.0 / t
        (latency_s, s_per_byte), _ = nnls(np.column_stack([weights, x * weights]), np.ones_like(t))
        if s_per_byte > 0:
            return float(latency_s), float(1.0 / (s_per_byte * 1e9))
    if base is None:
        return None
    transfer_s = x / (base.busbw_GBps * 1e9)
    if len(points) >= 2 or transfer_s[0] < base.latency_s:
        # Latency-bound sizes only: keep the base bandwidth, refit the latency alone.
        return max(0.0, float(statistics.median(t - transfer_s))), base.busbw_GBps
    if t[0] > base.latency_s:
        # One bandwidth-bound size: keep the base latency, refit the bandwidth.
        return base.latency_s, float(x[0] / ((t[0] - base.latency_s) * 1e9))
    ratio = float(t[0]) / collective_time_s(base, points[0][0])
    return base.latency_s * ratio, base.busbw_GBps / ratio


def fit_collectives(
    profile: HardwareProfile, samples: Iterable[CommSample]
) -> tuple[CollectiveFit, ...]:
    """One refitted `CollectiveFit` per (op, group size, placement) the samples cover."""
    by_key: dict[FitKey, dict[float, list[float]]] = defaultdict(lambda: defaultdict(list))
    for s in samples:
        if s.wire_s > 0:
            by_key[s.key][s.size_bytes].append(s.wire_s)
    fits = []
    for key in sorted(by_key):
        if sum(len(ts) for ts in by_key[key].values()) < MIN_CALLS:
            continue
        op, group_size, placement = key
        points = sorted((size, statistics.median(ts)) for size, ts in by_key[key].items())
        base = _base_fit(profile, key)
        fitted = fit_alpha_beta(op, group_size, points, base)
        if fitted is None:
            continue
        latency_s, busbw_GBps = fitted
        fits.append(
            CollectiveFit(
                op=op,  # type: ignore[arg-type]
                group_size=group_size,
                placement=placement,  # type: ignore[arg-type]
                latency_s=latency_s,
                busbw_GBps=busbw_GBps,
                algorithm=base.algorithm if base is not None else "calibrated",
            )
        )
    return tuple(fits)


def with_fits(profile: HardwareProfile, fits: Iterable[CollectiveFit]) -> tuple[CollectiveFit, ...]:
    """The profile's fits with ``fits`` replacing (or joining) those of the same key."""
    new = {(f.op, f.group_size, f.placement): f for f in fits}
    kept = [f for f in profile.communication.fits if (f.op, f.group_size, f.placement) not in new]
    return tuple(sorted([*kept, *new.values()], key=lambda f: (f.op, f.placement, f.group_size)))
