"""The device-to-host link that CPU activation offloading copies over, per direction.

Rates by device-name fragment (first match wins), GB/s (1e9 bytes/s) per GPU per
direction:

- GB200 and GB300 (Grace Blackwell superchips): NVLink-C2C, 900 GB/s bidirectional per
  link, one link per GPU, 450 GB/s per direction (Transformer Engine
  `docs/features/other_optimizations/cpu_offloading/cpu_offloading.rst`: "With NVLink-C2C
  (GB200), bandwidth jumps to 900 GB/s bidirectional per link"; GB300 keeps NVLink-C2C).
- B200, B300, H100, H200 and MI300X: PCIe Gen5 x16, 128 GB/s bidirectional, 64 GB/s per
  direction (the same document; `shared/reference/hardware.yaml` ``pcie_gen: 5``).
- A100: PCIe Gen4 x16, 64 GB/s bidirectional, 32 GB/s per direction
  (`shared/reference/hardware.yaml`, [S11] there).

The copies are priced at the link's peak rate.
"""

from __future__ import annotations

from profiles.schema import HardwareProfile
from specs.errors import SpecError

HOST_LINK_GBPS_BY_DEVICE = (
    ("GB200", 450.0),
    ("GB300", 450.0),
    ("B200", 64.0),
    ("B300", 64.0),
    ("H100", 64.0),
    ("H200", 64.0),
    ("MI300X", 64.0),
    ("A100", 32.0),
)
"""Device-name fragment -> host-link GB/s per GPU per direction (module docstring)."""


def device_rate_Bps(
    profile: HardwareProfile, table: tuple[tuple[str, float], ...], what: str, fix: str
) -> float:
    """Bytes per second of the first ``table`` row (device-name fragment, GB/s) whose
    fragment is in ``profile``'s device name; SpecError naming ``what`` is missing and
    ``fix`` for a device the table does not state."""
    name = profile.device.name
    for fragment, gbps in table:
        if fragment in name:
            return gbps * 1e9
    known = ", ".join(f for f, _ in table)
    raise SpecError(f"{what} for device {name!r} (known: {known}); {fix}")


def host_link_Bps(profile: HardwareProfile) -> float:
    """Bytes per second per direction between one device of ``profile`` and host memory;
    SpecError for a device without a stated link."""
    return device_rate_Bps(
        profile,
        HOST_LINK_GBPS_BY_DEVICE,
        "host_link: no device-to-host bandwidth",
        "plan without CPU activation offloading",
    )
