"""`paraplan profile`: measure GEMMs, attention, memory-bound operators and collectives on
the machine it runs on and fit them into a `HardwareProfile` (the schema of the stored
profiles).

Modules, in the order a run uses them: `shapes` (what to measure), `world` (spawned or
torchrun ranks, fail-fast), `compute` and `comm` (the sweeps, built on `timing`),
`device` (names, memory, NVML facts), `fit` (curves, α-β fits, held-out validation),
`assemble` (the profile and its provenance), `run` (`profile_machine`).
"""

from profiles.profiler.run import default_nproc, measure_machine, profile_machine
from profiles.profiler.world import MAX_RANKS_PER_CPU, ProfilingError, check_nproc

__all__ = [
    "MAX_RANKS_PER_CPU",
    "ProfilingError",
    "check_nproc",
    "default_nproc",
    "measure_machine",
    "profile_machine",
]
