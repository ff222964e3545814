"""`HardwareProfile`: what one device computes and how the machines that hold it talk.

A profile has these parts, kept apart because they vary with different things (vidur's
split of compute profiles per device from network profiles per topology):

- `device`: the datasheet figures of one accelerator (or of the CPU of a gloo machine);
- `compute`: how close real kernels come to those figures, as a function of shape;
- `communication`: α-β fits of every collective per group size and placement;
- `topology`: how many devices share a node and a scale-up domain, and the NICs;
- `provenance`: whether the numbers were derived from published sources or measured,
  and the spread of every measurement (a record, never a model input);
- `host` (CPU profiles only): the host cost of paraplan's own executor per operator, per
  streamed byte and per waited-for collective, read by the torch runtime.

Each section's dataclasses live in a module of their own: `profiles.schema_device`
(`device`, `compute`), `profiles.schema_network` (`communication`, `topology`),
`profiles.schema_provenance` and `profiles.schema_host`; the dtype keys and the shared field
checks in `profiles.schema_checks`. This module holds the profile that joins them.

The same schema holds a profile derived from sources (`profiles.derive`) and one that
`paraplan profile` measures (on GPUs with NCCL, or on a CPU with gloo, where device
"peak" is the best measured GEMM rate and the efficiency curve is relative to it).

Conventions
- Units are in the field names: TFLOP/s = 1e12 FLOP/s, GB/s = 1e9 bytes/s, GiB = 2**30
  bytes, seconds (`_s`).
- dtype keys are `bf16`, `fp16`, `fp8`, `fp32`; `fp32` is plain IEEE fp32 matmul (torch's
  default on CUDA keeps TF32 off for matmul), so its peak is the non-tensor-core figure.
- GEMM work is 2·m·n·k FLOP; efficiency is achieved FLOP/s over the dtype's peak.
- Attention throughput follows the FlashAttention benchmark convention: forward counts
  4·batch·heads·seq²·head_dim FLOP, halved under a causal mask, backward 2.5 times the
  forward. Stored throughputs are causal-counted, so time = causal FLOPs / throughput,
  which matches the Megatron-LM model-FLOPs convention (causal attention counted as half).
- Collectives: time_s = latency_s + size_bytes · bus_factor(op, n) / (busbw_GBps · 1e9),
  with nccl-tests' size and factor conventions (`profiles.schema_network.BUS_FACTOR_DOC`).
"""

from __future__ import annotations

from dataclasses import dataclass

from profiles.schema_checks import PEAK_DTYPE
from profiles.schema_device import ComputeProfile, DeviceSpec
from profiles.schema_host import HostOverheads
from profiles.schema_network import CommunicationProfile, Topology
from profiles.schema_provenance import Provenance
from specs.errors import SpecError

SCHEMA_VERSION = 1
"""The version this code reads and writes; a file with another version is refused."""


@dataclass(frozen=True, kw_only=True, slots=True)
class HardwareProfile:
    """Everything the cost model needs to know about one kind of machine."""

    schema_version: int = SCHEMA_VERSION
    """Version of this schema; files with another version are refused."""
    name: str
    """Profile name, e.g. ``h100-sxm-80gb`` (the stored file's stem)."""
    device: DeviceSpec
    """Datasheet figures of one device."""
    compute: ComputeProfile
    """Achievable compute and memory-bound rates, per device."""
    communication: CommunicationProfile
    """Collective fits, per topology."""
    topology: Topology
    """Node, scale-up domain and NIC layout."""
    provenance: Provenance
    """How the profile was made."""
    host: HostOverheads | None = None
    """Host costs of the torch runtime: CPU profiles only; None on a GPU profile, which
    the torch runtime prices kernel-bound."""

    def __post_init__(self) -> None:
        if self.schema_version != SCHEMA_VERSION:
            raise SpecError(
                f"HardwareProfile {self.name!r}: schema_version {self.schema_version} is not "
                f"supported (this paraplan reads version {SCHEMA_VERSION}); regenerate the "
                "profile with this version's `paraplan profile` or `python -m profiles.derive`"
            )
        if not self.name:
            raise SpecError("HardwareProfile.name must not be empty")
        _check_dtypes_have_peaks(self)
        if self.host is not None and self.device.kind != "cpu":
            raise SpecError(
                f"HardwareProfile {self.name!r}: a {self.device.kind} profile carries a host "
                "section; only CPU profiles have host overheads, drop the `host` key"
            )
        for fit in self.communication.fits:
            if fit.placement == "intra" and fit.group_size > self.topology.scale_up_domain:
                raise SpecError(
                    f"HardwareProfile {self.name!r}: intra fit {fit.op} has group_size "
                    f"{fit.group_size} > scale_up_domain {self.topology.scale_up_domain}; "
                    "larger groups span nodes and belong to placement 'inter'"
                )


def _check_dtypes_have_peaks(profile: HardwareProfile) -> None:
    peaks = profile.device.peak_tflops
    used = list(profile.compute.gemm_efficiency) + [c.dtype for c in profile.compute.attention]
    for dtype in used:
        if PEAK_DTYPE.get(dtype, dtype) not in peaks:
            raise SpecError(
                f"HardwareProfile {profile.name!r}: compute has a {dtype} curve but "
                f"device.peak_tflops has no {PEAK_DTYPE.get(dtype, dtype)} entry (has "
                f"{', '.join(sorted(peaks))}); add the peak or drop the curve"
            )
