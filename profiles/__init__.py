"""Hardware profiles: the schema, the stored profiles (`profiles/data/*.json`) and their
loader. A profile says what the device can do (peaks, GEMM/attention efficiency, memory
bandwidth) apart from how the cluster is wired (collective latency and bandwidth per group
size and placement, topology)."""

from profiles.lookup import (
    attention_tflops,
    bus_factor,
    collective_fit,
    collective_time_s,
    gemm_efficiency,
    gpus_per_node,
    memory_bandwidth_Bps,
    peak_flops,
)
from profiles.schema import SCHEMA_VERSION, HardwareProfile
from profiles.schema_network import CollectiveFit
from profiles.store import load_profile, save_profile, stored_profile_names

__all__ = [
    "SCHEMA_VERSION",
    "CollectiveFit",
    "HardwareProfile",
    "attention_tflops",
    "bus_factor",
    "collective_fit",
    "collective_time_s",
    "gemm_efficiency",
    "gpus_per_node",
    "load_profile",
    "memory_bandwidth_Bps",
    "peak_flops",
    "save_profile",
    "stored_profile_names",
]
