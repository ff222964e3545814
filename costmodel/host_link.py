"""The device-to-host link that CPU activation offloading copies over, per direction.

Rates by device-name fragment (first match wins), GB/s (1e9 bytes/s) per GPU per
direction:

- GB200 and GB300 (Grace Blackwell superchips): NVLink-C2C, 900 GB/s bidirectional
  between the Grace CPU and its GPUs (NVIDIA GB200 NVL72 and GB300 NVL72 product pages,
  "NVLink-C2C 900 GB/s"); one Grace serves two Blackwell GPUs, so each GPU is priced at a
  quarter, 225 GB/s per direction.
- B200, B300, H100, H200 and MI300X: PCIe Gen5 x16, 128 GB/s duplex, 64 GB/s per
  direction (`/work/shared/reference/hardware.yaml` ``pcie_gen: 5``, [S4] [S6] there).
- A100: PCIe Gen4 x16, 64 GB/s bidirectional, 32 GB/s per direction (same file, [S11]).

The copies are priced at the link's peak rate.
"""

from __future__ import annotations

from profiles.schema import HardwareProfile
from specs.errors import SpecError

HOST_LINK_GBPS_BY_DEVICE = (
    ("GB200", 225.0),
    ("GB300", 225.0),
    ("B200", 64.0),
    ("B300", 64.0),
    ("H100", 64.0),
    ("H200", 64.0),
    ("MI300X", 64.0),
    ("A100", 32.0),
)
"""Device-name fragment -> host-link GB/s per GPU per direction (module docstring)."""


def host_link_Bps(profile: HardwareProfile) -> float:
    """Bytes per second per direction between one device of ``profile`` and host memory;
    SpecError for a device without a stated link."""
    name = profile.device.name
    for fragment, gbps in HOST_LINK_GBPS_BY_DEVICE:
        if fragment in name:
            return gbps * 1e9
    known = ", ".join(f for f, _ in HOST_LINK_GBPS_BY_DEVICE)
    raise SpecError(
        f"host_link: no device-to-host bandwidth for device {name!r} (known: {known}); "
        "plan without CPU activation offloading"
    )
