"""Reading profiles written before the typed host section: the one conversion.

Profiles of schema version 1 written before `HardwareProfile.host` existed keep the torch
runtime's host costs as provenance spreads named as the profiler names its records
(`profiles.profiler.timing`): ``op_overhead.<probe>`` (a host-cost probe, seconds),
``memory.<op>.<dtype>.<bytes>B`` (a memory-bound operator at one size) and
``<op>.intra.<group>.<size>B`` (a collective within one host), and the two calibration
scales as ``compute.backward_scale`` and ``communication.layer_collective_scale``.

`upgrade_profile_data` rewrites such a profile's JSON form before it is parsed
(`profiles.store.profile_from_data`): a CPU profile without a ``host`` key (or with a
section of timings alone) gains the section built from those spreads
(`host_from_spread`) and the two scales, whose old keys it drops; a GPU profile drops the
two keys, which only the CPU executor's model read. The spreads themselves stay in the
provenance as the record of the measurement.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from profiles.schema_host import HostCollective, HostOverheads, HostStream, HostTiming
from profiles.schema_provenance import MeasurementSpread
from specs import serde
from specs.errors import SpecError

TIMING_PREFIX = "op_overhead."
"""Prefix of a host-cost probe's spread (`profiles.profiler.timing.OverheadTiming.quantity`)."""
STREAM_QUANTITY = re.compile(r"memory\.(\w+)\.(\w+)\.(\d+)B")
"""A memory-bound operator's spread (`profiles.profiler.timing.MemoryTiming.quantity`)."""
COLLECTIVE_QUANTITY = re.compile(r"(\w+)\.intra\.(\d+)\.(\d+)B")
"""A collective's spread within one host (`profiles.profiler.timing.CollectiveTiming.quantity`)."""
LEGACY_SCALES = (("compute", "backward_scale"), ("communication", "layer_collective_scale"))
"""(section, key) of the calibration scales that moved into the host section."""


def host_from_spread(
    spread: Sequence[MeasurementSpread],
    *,
    backward_scale: float = 1.0,
    layer_collective_scale: float = 1.0,
) -> HostOverheads:
    """The host section that ``spread`` holds (module docstring): every host-cost probe,
    memory-bound operator and within-host collective, statistics carried over unchanged."""
    timings, streams, calls = [], [], []
    for s in spread:
        stream = STREAM_QUANTITY.fullmatch(s.quantity)
        call = COLLECTIVE_QUANTITY.fullmatch(s.quantity)
        if s.quantity.startswith(TIMING_PREFIX):
            timings.append(
                HostTiming(name=s.quantity.removeprefix(TIMING_PREFIX), **s.host_stats())
            )
        elif stream:
            op, dtype, nbytes = stream.groups()
            streams.append(
                HostStream(op=op, dtype=dtype, bytes_moved=int(nbytes), **s.host_stats())
            )
        elif call:
            op, group, size = call.groups()
            calls.append(
                HostCollective(op=op, group_size=int(group), size_bytes=int(size), **s.host_stats())
            )
    return HostOverheads(
        timings=tuple(timings),
        streams=tuple(streams),
        collective_calls=tuple(calls),
        backward_scale=backward_scale,
        layer_collective_scale=layer_collective_scale,
    )


def _pop_scales(data: dict[str, Any], where: str) -> tuple[dict[str, Any], dict[str, float]]:
    """``data`` without the old scale keys, and their values by key."""
    out, scales = dict(data), {}
    for section, key in LEGACY_SCALES:
        part = out.get(section)
        if isinstance(part, dict) and key in part:
            part = dict(part)
            value = part.pop(key)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise SpecError(f"{where}.{section}.{key}: expected a number, got {value!r}")
            scales[key] = float(value)
            out[section] = part
    return out, scales


def upgrade_profile_data(data: Any, where: str) -> Any:
    """``data`` (a profile's JSON form) in the current layout (module docstring); a profile
    already in it comes back unchanged. Raises `SpecError` for a GPU profile whose old
    scale keys are not 1 (only a CPU profile's torch runtime was ever calibrated)."""
    if not isinstance(data, dict):
        return data
    out, scales = _pop_scales(data, where)
    device = out.get("device")
    kind = device.get("kind", "gpu") if isinstance(device, dict) else "gpu"
    if kind != "cpu":
        moved = {k: v for k, v in scales.items() if v != 1.0}
        if moved:
            raise SpecError(
                f"{where}: a {kind} profile carries the CPU executor's calibration scales "
                f"{moved}; a GPU profile has no host section: drop these keys or calibrate "
                "again with this paraplan"
            )
        return out
    host = out.get("host")
    current = "host" in out and (host is None or "streams" in host)
    if current and not scales:
        return out
    provenance = out.get("provenance")
    items = provenance.get("spread", []) if isinstance(provenance, dict) else []
    spread = [serde.from_dict(MeasurementSpread, s, where=f"{where}.spread") for s in items]
    legacy = serde.to_dict(host_from_spread(spread, **scales))
    out["host"] = {**legacy, **host} if isinstance(host, dict) else legacy
    return out
