"""Facts about the measured device and host: names, memory, clocks, links, versions.

Sources, tried in order and each allowed to be missing (hardware.md §4):
- CPU: the model name and vendor from /proc/cpuinfo (else `platform`), physical memory
  from ``os.sysconf`` (page size x physical pages).
- CUDA: ``torch.cuda.get_device_properties`` (name, total memory, SM count), then NVML
  through nvidia-ml-py: driver version, SM and memory clocks, active NVLink links and
  their version. Without the library, a GPU or a permission, NVML raises
  ``pynvml.NVMLError`` (or the import fails): those facts are simply absent.
- NICs: /sys/class/infiniband (RDMA devices and their port rates), absent elsewhere.
"""

from __future__ import annotations

import contextlib
import os
import platform
import socket
from dataclasses import dataclass, field
from pathlib import Path

import torch

NVLINK_GBPS_PER_LINK = {2: 25.0, 3: 25.0, 4: 25.0, 5: 50.0}
"""Per-direction GB/s of one NVLink link by NVLink version (NVLink 2-4: 25 GB/s per link
per direction, so 12 links = 300 GB/s on A100 and 18 = 450 GB/s on H100; NVLink 5: 50)."""
MAX_NVLINKS = 18
"""Links NVML is asked about (the most any NVIDIA GPU has: 18 on Hopper and Blackwell)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class DeviceInfo:
    """What the profiler could learn about one device and its host."""

    kind: str
    """`cpu` or `gpu`."""
    name: str
    """CPU model or GPU product name."""
    vendor: str
    """Maker."""
    memory_bytes: int
    """Physical memory of the device (the host's RAM for a CPU)."""
    host: str
    """Host name."""
    num_cpus: int
    """CPU cores this process may use."""
    driver_version: str | None = None
    """GPU driver version (NVML)."""
    nvlink_links: int | None = None
    """Active NVLink links of the GPU (NVML); None without NVML."""
    nvlink_version: int | None = None
    """NVLink version of the first active link (NVML)."""
    facts: dict[str, str] = field(default_factory=dict)
    """Further facts for the provenance notes (clocks, SM count, NIC rates)."""


def cpu_identity(cpuinfo_text: str) -> tuple[str | None, str | None]:
    """(model name, vendor) from the text of /proc/cpuinfo; None for what is missing."""
    name = vendor = None
    for line in cpuinfo_text.splitlines():
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if key == "model name" and name is None and value:
            name = value
        elif key == "vendor_id" and vendor is None and value:
            vendor = {"GenuineIntel": "Intel", "AuthenticAMD": "AMD"}.get(value, value)
    return name, vendor


def host_memory_bytes() -> int:
    """Physical memory of the host: page size x physical pages (``os.sysconf``)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 0


def _cpu_info(num_cpus: int) -> DeviceInfo:
    try:
        name, vendor = cpu_identity(Path("/proc/cpuinfo").read_text())
    except OSError:
        name, vendor = None, None
    return DeviceInfo(
        kind="cpu",
        name=name or platform.processor() or platform.machine() or "unknown CPU",
        vendor=vendor or "unknown",
        memory_bytes=host_memory_bytes(),
        host=socket.gethostname(),
        num_cpus=num_cpus,
        facts={"platform": platform.platform()},
    )


def nvml_facts(index: int) -> dict[str, object]:
    """Driver, clocks and NVLink state of GPU ``index`` from NVML; a fact NVML cannot give
    (no library, no GPU, not supported) is left out, and nothing raises."""
    try:
        import pynvml
    except ImportError:
        return {}
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return {}
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    except pynvml.NVMLError:
        handle = None
    queries = {
        "driver_version": lambda: _text(pynvml.nvmlSystemGetDriverVersion()),
        "sm_clock_max_mhz": lambda: pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM),
        "mem_clock_max_mhz": lambda: pynvml.nvmlDeviceGetMaxClockInfo(
            handle, pynvml.NVML_CLOCK_MEM
        ),
    }
    facts: dict[str, object] = {}
    for key, query in queries.items():
        with contextlib.suppress(pynvml.NVMLError):
            facts[key] = query()
    if handle is not None:
        facts.update(_nvlink_state(pynvml, handle))
    with contextlib.suppress(pynvml.NVMLError):
        pynvml.nvmlShutdown()
    return facts


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _nvlink_state(pynvml: object, handle: object) -> dict[str, object]:
    """Active links and the version of the first one; links NVML does not know end it."""
    active, version = 0, None
    for link in range(MAX_NVLINKS):
        try:
            if pynvml.nvmlDeviceGetNvLinkState(handle, link) == pynvml.NVML_FEATURE_ENABLED:
                active += 1
                if version is None:
                    version = pynvml.nvmlDeviceGetNvLinkVersion(handle, link)
        except pynvml.NVMLError:
            break
    return {"nvlink_links": active, "nvlink_version": version}


def _gpu_info(index: int, num_cpus: int) -> DeviceInfo:
    props = torch.cuda.get_device_properties(index)
    facts = nvml_facts(index)
    name = props.name
    vendor = "AMD" if getattr(torch.version, "hip", None) else "NVIDIA"
    return DeviceInfo(
        kind="gpu",
        name=name,
        vendor=vendor,
        memory_bytes=int(props.total_memory),
        host=socket.gethostname(),
        num_cpus=num_cpus,
        driver_version=_optional_str(facts.get("driver_version")),
        nvlink_links=_optional_int(facts.get("nvlink_links")),
        nvlink_version=_optional_int(facts.get("nvlink_version")),
        facts={
            "multiprocessors": str(props.multi_processor_count),
            **{k: str(v) for k, v in facts.items() if k.endswith("_mhz")},
        },
    )


def _optional_int(value: object) -> int | None:
    return int(value) if isinstance(value, int) else None


def _optional_str(value: object) -> str | None:
    return str(value) if value is not None else None


def describe_device(device: torch.device, num_cpus: int) -> DeviceInfo:
    """The `DeviceInfo` of ``device`` (a CUDA device or the CPU)."""
    if device.type == "cuda":
        return _gpu_info(device.index or 0, num_cpus)
    return _cpu_info(num_cpus)


def scale_up_GBps(info: DeviceInfo) -> float | None:
    """Per-direction NVLink bandwidth of the GPU (active links x per-link rate)."""
    if not info.nvlink_links or info.nvlink_version not in NVLINK_GBPS_PER_LINK:
        return None
    return info.nvlink_links * NVLINK_GBPS_PER_LINK[info.nvlink_version]


def infiniband_nics(root: Path = Path("/sys/class/infiniband")) -> tuple[int, float | None]:
    """(RDMA NICs, their summed port-1 rate in GB/s) from sysfs; (0, None) without any.

    A port's ``rate`` file reads like ``400 Gb/sec (4X NDR)``: bits, divided by 8 here.
    """
    if not root.is_dir():
        return 0, None
    devices = sorted(p for p in root.iterdir() if p.is_dir() or p.is_symlink())
    total = 0.0
    for dev in devices:
        try:
            total += float((dev / "ports" / "1" / "rate").read_text().split()[0]) / 8.0
        except (OSError, ValueError, IndexError):
            continue
    return len(devices), (total or None)


def collective_library_version(backend: str) -> str:
    """``nccl X.Y.Z`` from torch's NCCL, or gloo with the torch it ships in."""
    if backend == "nccl":
        try:
            version = torch.cuda.nccl.version()
        except (AttributeError, RuntimeError):
            return "nccl (version unknown)"
        if isinstance(version, tuple):
            return "nccl " + ".".join(str(v) for v in version)
        return f"nccl {version}"
    return f"gloo (bundled with torch {torch.__version__})"
