"""Fitted constants of a Megatron-core training step: the per-generation GEMM rate factors,
the MoE host-launch time (`MOE_HOST_LAUNCH_S`) and the MoE device time per token
(`MOE_TOKEN_DEVICE_S`) fitted jointly with them, and the host time per launch that Transformer
Engine issues per local expert (`MOE_EXPERT_LAUNCH_S`).

Two multipliers on a profile's GEMM efficiency curves are fitted on the published runs
(``published-runs-dev.csv``) rather than sourced, one value per GPU generation
(`profiles.schema_device.DeviceSpec.generation`) that has published runs of its own and one shared
value for the other generations: the sustained 16-bit GEMM rate (`SUSTAINED_GEMM_RATE_FACTORS`,
`SUSTAINED_GEMM_RATE_SHARED`) and the FP8 GEMM rate (`FP8_GEMM_RATE_FACTORS`,
`FP8_GEMM_RATE_FACTOR`). Both are looked up by `generation_rate_factor` and applied by
`costmodel.execution_presets.framework_profile`; `bench/validate_published.py`
(`validation_fit.fit_model`) refits them jointly with `MOE_HOST_LAUNCH_S`
and passes each candidate through the `ExecutionOptions` overrides
(``sustained_gemm_rate_factor``, ``fp8_gemm_rate_factor``), so the defaults here are the
values its last fit printed.

Sustained 16-bit GEMM rate. A profile's GEMM efficiency curves come from single-kernel
benchmarks: each shape timed alone on an idle GPU, the fastest of many repetitions (the MAMF
figures of hardware.md [S1]; the A100 curve's top is a sustained square GEMM on random data,
[S55] in
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
(`bench/validate_published.py`, `validation_fit.fit_model`), not sourced: one value per
GPU generation (`profiles.schema_device.DeviceSpec.generation`) with published dense 16-bit runs,
and one value fitted on all those runs together for the other GPU generations
(`SUSTAINED_GEMM_RATE_SHARED`). It multiplies the bf16 and fp16 curves only: FP8 GEMMs keep
their own fitted factors (`FP8_GEMM_RATE_FACTORS`), so the two stay
separable, and fp32 curves have no published runs to fit. It composes with
`ExecutionOptions.gemm_rate_factor` by multiplication where both apply. The 2021 option set
(`costmodel.execution_presets.MEGATRON_2021`) fixes this one at 1 and keeps its sourced rate of the
CUDA 11 cuBLAS (`costmodel.execution_presets.CUDA11_GEMM_RATE_FACTOR`) alone: a fitted value on top
would have to be fitted on the 2021 rows themselves, and one fitted on the other A100 rows
(a newer stack at another base rate) does not carry over to them (docs/cost-model.md gives
the leave-one-source-out evidence). The torch runtime (paraplan's executor) never gets it, nor
does a CPU profile (`costmodel.execution_presets.framework_profile`).

FP8 GEMM rate. Transformer Engine's FP8 GEMMs in a training step run below the
profile's fp8 curve as well; the factor multiplies the fp8 curve only, on any device kind
(`FP8_GEMM_RATE_FACTORS` names the rows that fit each generation).
"""

from __future__ import annotations

from profiles.schema import HardwareProfile

SUSTAINED_DTYPES: tuple[str, ...] = ("bf16", "fp16")
"""The GEMM curves the sustained rate factor multiplies."""

SUSTAINED_GEMM_RATE_FACTORS: dict[str, float] = {"ampere": 0.7, "hopper": 0.85}
"""Default sustained 16-bit GEMM rate factor by `DeviceSpec.generation`, for the
generations with published dense 16-bit runs of their own: fitted by
`bench/validate_published.py` (`validation_fit.fit_model`, grid 1.0 down to 0.6 in steps
of 0.05) jointly with `FP8_GEMM_RATE_FACTORS` and `MOE_HOST_LAUNCH_S`,
on the median |log(predicted / published)| of each generation's dense bf16/fp16 rows of
``published-runs-dev.csv`` whose execution options leave the factor to this default. The
bench fits by the profile's generation (its rows' ``fit_generation``); the rows that
fitted each are listed by the bench's ``--json``
(``fitted.sustained_fitted_on_by_generation``): ampere by the MegaScale Table 2 Megatron-LM
baseline rows (the SC21 and BLOOM rows keep the 2021 option set's sourced cuBLAS factor
alone, `costmodel.execution_presets.MEGATRON_2021`), hopper by the Megatron-LM README (2024) and
Nemotron-4 15B rows. Each generation's value rests on one or two source families, so
leave-one-source-out can barely test it: without MegaScale, ampere falls back to the
shared value; without the README rows, hopper's refit is 1.0. The README rows with pipelines
are priced without interleaving (their degree is not published); the Nemotron-4 340B rows,
interleaved at an unpublished degree and so outside the fit, give a pace per microbatch that
no degree changes (`bench/interleaved_h100.py`, docs/cost-model.md): 0.183-0.200 s published
against 0.180 s priced at 0.85 and 0.189 s at 0.8."""

SUSTAINED_GEMM_RATE_SHARED = 0.75
"""Default sustained 16-bit GEMM rate factor of a GPU generation without its own entry in
`SUSTAINED_GEMM_RATE_FACTORS` (Blackwell and Blackwell Ultra, whose published 16-bit runs
are all MoE; CDNA 3; a measured GPU of unknown generation): one value fitted on every
dense 16-bit row of the ampere and hopper fits together, the sum of the two generations'
median |log(predicted / published)| (``fitted.sustained_gemm_rate_factor_shared`` of the
bench's ``--json``); MoE rows do not move it."""

FP8_GEMM_RATE_FACTORS: dict[str, float] = {
    "hopper": 0.65,
    "blackwell": 0.6,
    "blackwell_ultra": 0.8,
}
"""Default FP8 GEMM rate factor (`ExecutionOptions.fp8_gemm_rate_factor`) by
`profiles.schema_device.DeviceSpec.generation`, for the generations with published FP8 runs of
their own: fitted by `bench/validate_published.py` (`validation_fit.fit_model` with
``per_generation``) jointly with `MOE_HOST_LAUNCH_S` and the sustained
16-bit factors (`SUSTAINED_GEMM_RATE_FACTORS`), by grid coordinate descent on one objective:
the median |log(predicted / published)| of each GPU generation's dense FP8 rows of
``published-runs-dev.csv``, summed over the generations, plus the mean
|log(predicted / published)| of the MoE rows. The rows that fitted each generation's value
are listed by the bench's ``--json`` (``fitted.fp8_fitted_on_by_generation``): hopper by the
NeMo long-sequence Llama-2-7B rows on H100 (priced with FlashAttention-2-class attention as
their stack ran it), blackwell by the Megatron-Bridge and Megatron-MoE model-zoo rows on B200
and GB200, blackwell_ultra by the Megatron-Bridge rows on B300 and GB300. Blackwell Ultra
has its own value because same-recipe Megatron-Bridge runs publish a higher rate per GPU on
GB300 than on GB200 (the bench's ``same_recipe_ratios``) that the profiles' peaks, copied
from GB200's MAMF for want of a GB300 figure, do not carry. Each generation's FP8 rows come
from one source family, so leaving it out leaves the generation to the shared value
(`FP8_GEMM_RATE_FACTOR`). The FP8 quantization kernels are priced explicitly
(`costmodel.fp8_quantization.fp8_quantize_time_s`)."""

FP8_GEMM_RATE_FACTOR = 0.7
"""Default FP8 GEMM rate factor of a GPU generation without its own entry in
`FP8_GEMM_RATE_FACTORS` (Ampere, whose published runs are 16-bit; CDNA 3; a measured GPU of
unknown generation): one value fitted on every dense FP8 row together, the same objective as
`FP8_GEMM_RATE_FACTORS` over those rows (``fitted.fp8_gemm_rate_factor`` of the bench's
``--json``, whose ``fitted_on`` lists the rows; MoE rows do not set it)."""


def generation_rate_factor(
    profile: HardwareProfile,
    *,
    by_generation: dict[str, float],
    shared: float,
    override: float | None,
    bare_on_cpu: bool,
) -> float:
    """Fitted rate factor, in (0, 1], of ``profile``: ``override`` when given, 1 on a CPU
    profile when ``bare_on_cpu``, else ``by_generation`` at the profile's
    `DeviceSpec.generation`, ``shared`` for a generation without its own entry."""
    if override is not None:
        return override
    if bare_on_cpu and profile.device.kind != "gpu":
        return 1.0
    return by_generation.get(profile.device.generation, shared)


def sustained_gemm_rate_factor(profile: HardwareProfile, override: float | None = None) -> float:
    """Multiplier, in (0, 1], on ``profile``'s bf16 and fp16 GEMM efficiency for a
    Megatron-core training step: ``override`` when given
    (`ExecutionOptions.sustained_gemm_rate_factor`), 1 on a CPU profile, else the value of
    the profile's generation (`SUSTAINED_GEMM_RATE_FACTORS`, `SUSTAINED_GEMM_RATE_SHARED`
    for the others)."""
    return generation_rate_factor(
        profile,
        by_generation=SUSTAINED_GEMM_RATE_FACTORS,
        shared=SUSTAINED_GEMM_RATE_SHARED,
        override=override,
        bare_on_cpu=True,
    )


def fp8_gemm_rate_factor(profile: HardwareProfile, override: float | None = None) -> float:
    """Multiplier, in (0, 1], on ``profile``'s fp8 GEMM efficiency for a Megatron-core
    training step with Transformer Engine FP8: ``override`` when given
    (`ExecutionOptions.fp8_gemm_rate_factor`), else the value of the profile's generation
    (`FP8_GEMM_RATE_FACTORS`; `FP8_GEMM_RATE_FACTOR` for the others), on any device kind."""
    return generation_rate_factor(
        profile,
        by_generation=FP8_GEMM_RATE_FACTORS,
        shared=FP8_GEMM_RATE_FACTOR,
        override=override,
        bare_on_cpu=False,
    )


FP4_GEMM_RATE_FACTORS: dict[str, float] = {"blackwell": 0.55, "blackwell_ultra": 0.5}
"""Default FP4 GEMM rate factor (`ExecutionOptions.fp4_gemm_rate_factor`) by
`profiles.schema_device.DeviceSpec.generation`, the multiplier on a profile's fp4 curve (the
fp8 curve on the fp4 peak, `profiles.derive_rules`) for the GEMMs of an nvfp4 job
(Transformer Engine's ``NVFP4BlockScaling``). Fitted by `bench/validate_published.py` (grid
of 0.05, jointly with the FP8 factors) on the median |log(predicted / published)| of each
generation's dense NVFP4 rows of ``published-runs-dev.csv``: blackwell by the
Megatron-Bridge GB200 rows, blackwell_ultra by the GB300 rows (Llama 3 70B and Llama 3.1
405B, releases 26.02 to 26.06; the bench's ``--json`` lists them,
``fitted.fp4_fitted_on_by_generation``). Every NVFP4 row is a Megatron-Bridge row, so
leave-one-source-out cannot test these values: without that family a generation takes its
FP8 factor. Only the generations with FP4 tensor cores price nvfp4 jobs; any other takes
`FP8_GEMM_RATE_FACTOR`."""


def fp4_gemm_rate_factor(profile: HardwareProfile, override: float | None = None) -> float:
    """Multiplier, in (0, 1], on ``profile``'s fp4 GEMM efficiency for a Megatron-core
    training step with Transformer Engine NVFP4: ``override`` when given
    (`ExecutionOptions.fp4_gemm_rate_factor`), else the fitted value of the profile's
    generation (`FP4_GEMM_RATE_FACTORS`; `FP8_GEMM_RATE_FACTOR` for the others)."""
    return generation_rate_factor(
        profile,
        by_generation=FP4_GEMM_RATE_FACTORS,
        shared=FP8_GEMM_RATE_FACTOR,
        override=override,
        bare_on_cpu=False,
    )


MOE_HOST_LAUNCH_S = 50e-6
"""Default `ExecutionOptions.moe_host_launch_s`: fitted by `bench/validate_published.py`
jointly with `FP8_GEMM_RATE_FACTORS` (the objective in its docstring;
5 us grid) on every priced trust A/B MoE row of ``published-runs-dev.csv``
(Megatron-Bridge and Megatron-MoE model-zoo recipes; the bench's ``--json`` lists them,
``fitted.moe_host_fitted_on``), one value for every GPU generation.
The floor binds on rows with little GPU work per MoE layer
(micro-batch 1, fine-grained experts). Fitted, not sourced: the published eager host-cost
figures price a Python-level module call on one host CPU and software release (Transformer
Engine issue 2053: one Linear forward on Xeon and Grace hosts), not the launch count's mix
of Python-level ops and C++-issued per-expert launches (docs/cost-model.md, "Host floor");
`bench/validate_published.py --host-launch-us` fixes it instead of fitting it. It prices the
Python-level launches (`costmodel.runtimes.megatron.moe_launches.MoeLaunches.python`); the
launches Transformer Engine issues per local expert from C++ take `MOE_EXPERT_LAUNCH_S`, which
the fit ties to it."""


MOE_EXPERT_LAUNCH_S = MOE_HOST_LAUNCH_S
"""Default `ExecutionOptions.moe_expert_launch_s`: host seconds per launch that Transformer
Engine issues per local expert from C++ inside one Python call (`costmodel.runtimes.megatron.
moe_launches.MoeLaunches.expert`): one cuBLASLt GEMM per expert in
``te_general_grouped_gemm`` (`transformer_engine/pytorch/csrc/extensions/gemm.cpp`, a loop
of ``nvte_cublas_gemm_v2`` over four compute streams in ``multi_stream_cublas_gemm``,
`transformer_engine/common/gemm/cublaslt_gemm.cu`: per GEMM the operand wrappers, the
cuBLASLt matrix layouts and matmul descriptor, ``cublasLtMatmulAlgoGetHeuristic`` and
``cublasLtMatmul``), and one quantization per expert slice in ``split_quantize``
(`pytorch/csrc/extensions/cast.cpp`, ``multi_tensor_quantize_impl``).

Tied to `MOE_HOST_LAUNCH_S` by the fit (`bench/row_pricing.FIT_GRID`,
``expert_launch_tied``): one fitted time per launch of either kind. The published MoE rows
price the per-expert launches far above what a C++-issued launch costs on the host (the
nearest published figure, a host-bound loop of ``torch.matmul`` on 512 x 512 bf16 operands,
takes 8.25-8.56 us per call with its Python call and ATen dispatch: PyTorch issue 161822):
fitted apart (grid 0, 2, 5, 10, 20, 30, 50 us) the per-expert time took the grid's top,
50 us, with the Python-level one at 45 us, and without the Megatron-Bridge rows it fell to 0
(the model zoo's four rows left alone run 2 and 4 local experts), so the leave-one-source-out
median |error| rose from 10.8% to 11.7% and its p90 from 22.9% to 24.9%. What the rows price
per local expert beyond a launch is not located; at 10 us per expert launch, with the other
fitted values kept, DeepSeek-V3 at pp 16 and Qwen3 235B at pp 8 vpp 4 ep 8 are 20-60% fast.
``--expert-launch-us`` of `bench/validate_published.py` fixes it apart."""


MOE_TOKEN_DEVICE_S = 175e-9
"""Default `ExecutionOptions.moe_token_device_s`: seconds of device time per token of a MoE
layer (forward and backward) that no priced kernel accounts for, fitted by
`bench/validate_published.py` jointly with `MOE_HOST_LAUNCH_S` and the GEMM rate factors
(the objective in `FP8_GEMM_RATE_FACTORS`; grid 0 to 300 ns in steps of 25 ns) on every
priced trust A/B MoE row of ``published-runs-dev.csv`` (the bench's ``--json`` lists them,
``fitted.moe_host_fitted_on``), one value for every GPU generation.

What it stands for, from those rows (docs/cost-model.md, "What the Qwen3 MoE rows show";
`bench/moe_host_share.py`): priced with their kernels alone, the MoE rows leave a similar
device time per token and layer unexplained at micro-batch 1, 4 and 8 and at hidden sizes
2048, 4096 and 7168 (Qwen3 30B-A3B, Qwen3 235B-A22B, DeepSeek-V3), so it is priced per
token, not per FLOP: a longer expert GEMM time (a rate factor on the expert GEMMs) moves the
wide models' rows too slow before it closes the narrow ones'. The kernels that take it are
not identified; the expert GEMMs, the expert-parallel exchange, the permutations, the
router and load imbalance are each ruled out as its sole cause there. Fitted on Blackwell
and Blackwell Ultra rows only (no other generation has trust A/B MoE rows), all of them on
profiles of `MOE_TOKEN_DEVICE_HBM_GBPS`; another device takes it scaled by that bandwidth
over its own (`token_device_s`)."""

MOE_TOKEN_DEVICE_HBM_GBPS = 8000.0
"""HBM bandwidth, GB/s, of the profiles whose rows fit `MOE_TOKEN_DEVICE_S` (B200, B300,
GB200 NVL72, GB300 NVL72: 8,000 GB/s each, ``hardware.yaml``). The kernels behind the
fitted time are not identified; it is taken as device work of the kind a MoE layer runs
outside its GEMMs and exchanges (permutations, router, element-wise kernels), which is
memory-bound, so a device with less HBM bandwidth takes proportionally longer (H100 SXM,
3,350 GB/s: 2.39x). Scaling by the bandwidth rather than by the 16-bit peak (2.27x on H100,
7.2x on A100) is the smaller extrapolation on most profiles; neither is measured (no
trust A/B MoE row runs on another generation)."""


def token_device_s(profile: HardwareProfile, per_token_s: float) -> float:
    """Seconds per token of a MoE layer's unattributed device time on ``profile``:
    ``per_token_s`` (`ExecutionOptions.moe_token_device_s`, at `MOE_TOKEN_DEVICE_HBM_GBPS`)
    times `MOE_TOKEN_DEVICE_HBM_GBPS` over the profile's HBM bandwidth (positive by the
    profile schema)."""
    return per_token_s * MOE_TOKEN_DEVICE_HBM_GBPS / profile.device.hbm_GBps


MOE_FIT_GENERATIONS: tuple[str, ...] = ("blackwell", "blackwell_ultra")
"""`DeviceSpec.generation` of the published MoE rows that fit `MOE_HOST_LAUNCH_S` and
`MOE_TOKEN_DEVICE_S` (``fitted.moe_host_fitted_on`` of `bench/validate_published.py --json`:
Megatron-Bridge and model-zoo recipes on B200, B300, GB200 and GB300); on any other
generation both are applied unfitted. `tests/bench/test_fitted_generations.py` derives it,
and the keys of the GEMM rate factor tables, from the dev set's rows."""
