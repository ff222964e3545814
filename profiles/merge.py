"""The median of several measured profiles of one machine: every figure its median.

A quick profile of a shared host is one draw of the host's changing speed: other tenants
take time slices for seconds to minutes, so profiles taken minutes apart can differ in a
probe by a factor of two and in the collective figures that price a tensor-parallel step.
The median of each figure over three or more profiles stands for the machine the way the
middle run stands for a plan.

`median_profile` works on the profiles' JSON form (`specs.serde.to_dict`): every number
becomes the median of its values at the same place, lists pair their items by position
(measurement spreads by ``quantity``, collective fits by op, group and placement, and the
host section's rows by their keys, since those are keyed; a GEMM efficiency curve, whose
points differ where a profile merged equal neighbours, is read by every profile at the
union of their points with `profiles.lookup.curve_efficiency`: the median of
non-decreasing curves is one), and any other value (names, kinds, units, dtypes) must
agree, apart from the provenance, which names the merged profiles. Medians keep each spread's
``min <= mean <= max`` (and its median between the bounds): the order statistics of
per-profile bounds bound those of the means.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from profiles.lookup import curve_efficiency
from profiles.schema import HardwareProfile
from profiles.schema_device import EfficiencyPoint
from profiles.store import profile_from_data
from specs import serde
from specs.errors import SpecError

KEYED_LISTS = {
    "spread": ("quantity",),
    "fits": ("op", "group_size", "placement"),
    "timings": ("name",),
    "streams": ("op", "dtype", "bytes_moved"),
    "collective_calls": ("op", "group_size", "size_bytes"),
    "transcendental": ("op", "elements"),
}
"""Lists whose items pair by these keys rather than by position."""
FREE_FIELDS = ("provenance.date", "provenance.command", "provenance.notes", "name")
"""Fields that may differ between the profiles (the first profile's value is kept)."""


def median_profile(
    profiles: Sequence[HardwareProfile], *, command: str, name: str | None = None
) -> HardwareProfile:
    """The profile whose every figure is the median of ``profiles``' figures (module
    docstring), named ``name`` (default: the first profile's name); its provenance notes
    the merge and ``command``. Raises `SpecError` for fewer
    than two profiles, or when they differ in anything but their figures (another device,
    another set of measured points: profile them with one paraplan version)."""
    if len(profiles) < 2:
        raise SpecError(f"median_profile needs at least two profiles, got {len(profiles)}")
    trees = [serde.to_dict(p) for p in profiles]
    merged = _merge(trees, "")
    if name is not None:
        merged["name"] = name
    provenance = merged["provenance"]
    provenance["command"] = command
    provenance["notes"] = [
        *trees[0]["provenance"]["notes"],
        f"every figure the median of {len(trees)} profiles measured "
        f"{', '.join(sorted({t['provenance']['date'] for t in trees}))} "
        "(profiles.merge.median_profile)",
    ]
    return profile_from_data(merged, "median_profile")


def _merge(values: list[Any], path: str) -> Any:
    first = values[0]
    if path.lstrip(".") in FREE_FIELDS:
        return first
    if isinstance(first, bool) or first is None or isinstance(first, str):
        return _agreed(values, path)
    if isinstance(first, int | float):
        if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
            raise SpecError(f"median_profile: {path} is a number in one profile only: {values}")
        if all(isinstance(v, int) for v in values):
            return statistics.median_low(values)  # counts stay whole
        return statistics.median(values)
    if isinstance(first, dict):
        keys = set(first)
        if any(set(v) != keys for v in values):
            raise SpecError(f"median_profile: {path} has different fields: {values}")
        return {k: _merge([v[k] for v in values], f"{path}.{k}") for k in first}
    if isinstance(first, list):
        return _merge_list(values, path)
    raise SpecError(f"median_profile: {path}: unexpected value {first!r}")


def _merge_list(values: list[list[Any]], path: str) -> list[Any]:
    if path.startswith(".compute.gemm_efficiency."):
        return _merge_gemm_curve(values)
    key = KEYED_LISTS.get(path.rsplit(".", 1)[-1])
    if key is None:
        if any(len(v) != len(values[0]) for v in values):
            lengths = [len(v) for v in values]
            raise SpecError(
                f"median_profile: {path} has {lengths} items across the profiles; profile "
                "every one with the same paraplan version and options"
            )
        return [
            _merge(list(items), f"{path}[{i}]") for i, items in enumerate(zip(*values, strict=True))
        ]
    by_key = [{tuple(item[k] for k in key): item for item in v} for v in values]
    keys = list(by_key[0])
    missing = [k for k in keys if any(k not in other for other in by_key[1:])]
    extra = [k for other in by_key[1:] for k in other if k not in by_key[0]]
    if missing or extra:
        raise SpecError(
            f"median_profile: {path} items {sorted(set(map(str, missing + extra)))} are not in "
            "every profile; profile every one with the same paraplan version and options"
        )
    return [_merge([d[k] for d in by_key], f"{path}[{k}]") for k in keys]


def _merge_gemm_curve(curves: list[list[dict[str, float]]]) -> list[dict[str, float]]:
    points = [[EfficiencyPoint(**p) for p in curve] for curve in curves]
    gflops = sorted({p["gflop"] for curve in curves for p in curve})
    return [
        {"gflop": g, "efficiency": statistics.median(curve_efficiency(c, g) for c in points)}
        for g in gflops
    ]


def _agreed(values: list[Any], path: str) -> Any:
    if any(v != values[0] for v in values):
        raise SpecError(
            f"median_profile: {path} differs between the profiles ({values}); merge profiles "
            "of one machine and one paraplan version"
        )
    return values[0]
