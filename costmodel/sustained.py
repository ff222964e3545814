"""Sustained 16-bit GEMM rate of a training step, per GPU generation.

A profile's GEMM efficiency curves come from single-kernel benchmarks: each shape timed
alone on an idle GPU, the fastest of many repetitions (the MAMF figures of hardware.md
[S1]; the A100 curve's top is a sustained square GEMM on random data, [S55] in
`profiles.derive`). A training step at full load runs its GEMMs below those rates:

- under the power limit the firmware lowers the SM clock, and GEMMs on random operands
  draw the most power (a continuous matmul loop runs power-capped: NVIDIA developer
  forum, "About GPU peak performance", topic 264462);
- communication kernels run concurrently on the same SMs (NCCL's collectives under
  Megatron-core's overlapped gradient reduction, parameter gathering and tensor-parallel
  overlap): a GEMM sized to one wave over all SMs spills into a second wave when a
  concurrent ``ncclAllGather`` holds 24 of an H100's 132 SMs (NVIDIA developer forum,
  "Compute-communication overlap causes severe GEMM performance degradation because of
  tail effect", topic 337991).

Neither effect has a published per-generation figure, so the factor is fitted
(`bench/validate_published.py`, `validation_stats.fit_model`), not sourced: one value per
GPU generation (`profiles.schema.DeviceSpec.generation`) with published dense 16-bit runs,
and one value fitted on all those runs together for the other GPU generations
(`SUSTAINED_GEMM_RATE_SHARED`). It multiplies the bf16 and fp16 curves only: FP8 GEMMs keep
their own fitted factors (`costmodel.execution.FP8_GEMM_RATE_FACTORS`), so the two stay
separable, and fp32 curves have no published runs to fit. It composes with
`ExecutionOptions.gemm_rate_factor` by multiplication where both apply. The 2021 option set
(`costmodel.execution.MEGATRON_2021`) fixes this one at 1 and keeps its sourced rate of the
CUDA 11 cuBLAS (`CUDA11_GEMM_RATE_FACTOR`) alone: a fitted value on top would have to be
fitted on the 2021 rows themselves, and one fitted on the other A100 rows (a newer stack at
another base rate) does not carry over to them (docs/cost-model.md gives the
leave-one-source-out evidence). The torch runtime (paraplan's executor) never gets it, nor
does a CPU profile (`costmodel.execution.framework_profile`).
"""

from __future__ import annotations

from profiles.schema import HardwareProfile

SUSTAINED_DTYPES: tuple[str, ...] = ("bf16", "fp16")
"""The GEMM curves the sustained rate factor multiplies."""

SUSTAINED_GEMM_RATE_FACTORS: dict[str, float] = {"ampere": 0.7, "hopper": 0.9}
"""Default sustained 16-bit GEMM rate factor by `DeviceSpec.generation`, for the
generations with published dense 16-bit runs of their own: fitted by
`bench/validate_published.py` (`validation_stats.fit_model`, grid 1.0 down to 0.6 in steps
of 0.05) jointly with `FP8_GEMM_RATE_FACTORS` and `MOE_HOST_LAUNCH_S`, on the median
|log(predicted / published)| of each generation's dense bf16/fp16 rows of
``published-runs-dev.csv`` whose execution options leave the factor to this default. The
bench fits by the profile's generation (its rows' ``fit_generation``); the rows that
fitted each are listed by the bench's ``--json``
(``fitted.sustained_fitted_on_by_generation``): ampere by the MegaScale Table 2 Megatron-LM
baseline rows (the SC21 and BLOOM rows keep the 2021 option set's sourced cuBLAS factor
alone, `costmodel.execution.MEGATRON_2021`), hopper by the Megatron-LM README (2024) and
Nemotron-4 15B rows. Each generation's value rests on one or two source families, so
leave-one-source-out can barely test it: without MegaScale, ampere falls back to the
shared value; without the README rows, hopper's refit is 1.0."""

SUSTAINED_GEMM_RATE_SHARED = 0.75
"""Default sustained 16-bit GEMM rate factor of a GPU generation without its own entry in
`SUSTAINED_GEMM_RATE_FACTORS` (Blackwell and Blackwell Ultra, whose published 16-bit runs
are all MoE; CDNA 3; a measured GPU of unknown generation): one value fitted on every
dense 16-bit row of the ampere and hopper fits together, the sum of the two generations'
median |log(predicted / published)| (``fitted.sustained_gemm_rate_factor_shared`` of the
bench's ``--json``); MoE rows do not move it."""


def sustained_gemm_rate_factor(profile: HardwareProfile, override: float | None = None) -> float:
    """Multiplier, in (0, 1], on ``profile``'s bf16 and fp16 GEMM efficiency for a
    Megatron-core training step: ``override`` when given
    (`ExecutionOptions.sustained_gemm_rate_factor`), 1 on a CPU profile, else the value of
    the profile's generation (`SUSTAINED_GEMM_RATE_FACTORS`, `SUSTAINED_GEMM_RATE_SHARED`
    for the others)."""
    if override is not None:
        return override
    if profile.device.kind != "gpu":
        return 1.0
    return SUSTAINED_GEMM_RATE_FACTORS.get(profile.device.generation, SUSTAINED_GEMM_RATE_SHARED)
