"""The `ExecutionOptions` of named framework stacks, and the options as a device and a
runtime see them.

`DEFAULT_OPTIONS` is Megatron-LM's current defaults, `TORCH_OPTIONS` paraplan's executor;
the caller names the runtime, nothing is inferred from the profile's device
(`runtime_options`). `MEGATRON_2021` describes the code
of Narayanan et al. 2021 (SC21, arXiv 2104.04473) as its reproduction scripts ran it
(`examples/sc21` of NVIDIA/Megatron-LM: container nvcr.io/nvidia/pytorch:20.12-py3, i.e.
PyTorch 1.8, and `--fp16 --loss-scale 8192`, no `--accumulate-allreduce-grads-in-fp32`);
each field's docstring names the code it stands for; `DEEPSPEED_ZERO3_2021` that code under
DeepSpeed's ZeRO stage 3; `MEGATRON_2023` the code of early 2023.
`device_options` resolves the fields left to the device and `framework_profile` the hardware
profile as the framework's kernels see it.
"""

from __future__ import annotations

import dataclasses

from costmodel.execution import ExecutionOptions
from costmodel.execution_rules import RUNTIMES
from costmodel.fitted_rates import (
    SUSTAINED_DTYPES,
    fp4_gemm_rate_factor,
    fp8_gemm_rate_factor,
    sustained_gemm_rate_factor,
)
from costmodel.flash_attention2 import FA3_CURVE_PREFIX, fa2_attention_curves
from profiles.schema import HardwareProfile
from profiles.schema_device import EfficiencyPoint
from specs.errors import SpecError

CUDA11_GEMM_RATE_FACTOR = 230.0 / 257.0
"""Sustained fp16 GEMM rate of the CUDA 11 cuBLAS over the one the stored A100 profile is
built on (about 0.895), for the same benchmark: a square 8192³ fp16 ``a @ b`` on
``torch.randn`` inputs on an A100 SXM4 80GB. CUDA 11 era: 230 TFLOP/s (mli/transformers-
benchmarks, README "MatMul FP16" for A100 80GB, `micro_bench.ipynb`, PyTorch container
22.07, CUDA 11.7). The profile's top: 257 TFLOP/s (hardware.md [S55], H. He 2024, current
PyTorch and cuBLAS; `profiles/derive.py`). The SC21 runs used an older CUDA 11 still
(container 20.12: CUDA 11.1, cuBLAS 11.3), for which no figure was found; 11.7 is the
nearest sourced stack, so this is if anything an upper bound on their GEMM rate."""


DEFAULT_OPTIONS = ExecutionOptions()
"""Megatron-LM's current defaults."""

MEGATRON_2021_FRAGMENTATION = 0.31
"""Allocator fragmentation share of the dynamic bytes for `MEGATRON_2021`
(`ExecutionOptions.allocator_fragmentation`): the smallest share, to 0.01, with which the
memory model reproduces what Narayanan et al. 2021 (arXiv 2104.04473, §5.9 and Figure 17)
report of the run without activation recomputation, a 145B GPT (80 layers, hidden 12288, 96
heads, sequence 2048) on 128 A100 80GB at tp 8, pp 16, micro-batch 1, 1F1B, global batch
1 to 256 (``examples/academic_paper_scripts/sc21/run_figure_17.sh``): activation
recomputation "is needed to support larger batch sizes", and the best run without it is at
a smaller batch than the runs with it. Under 1F1B the first stage holds min(pp, m)
microbatches, so every batch from 16 up has the same footprint as 16: the run without
recomputation did not fit at batch 16. Its stored activations follow Korthikanti et al.
2022 (Table 2: 34·s·b·h + 5·a·s²·b per layer without tensor parallelism) and the rest of
`costmodel.memory` for this stack, local DDP's gradients of the previous iteration included
(`ExecutionOptions.stale_main_grad`), which puts that run at 66.5 GiB before fragmentation
with 44.3 GiB of dynamic bytes; exceeding the 80 GiB device takes a share above 0.304. The
mechanism is the PyTorch 1.8 caching allocator (no ``max_split_size_mb``, no expandable
segments) splitting the large blocks of the materialized attention, scores, softmax output,
dropout mask and output of a·s²·b/t elements each, for smaller requests, so that a freed
score block no longer serves the next one (``c10/cuda/CUDACachingAllocator.cpp``). One
inequality bounds it from below; no source measures it. Stacks with fused attention keep
`costmodel.memory_allowances.FrameworkAllowance.fraction`."""

MEGATRON_2021 = ExecutionOptions(
    attention="materialized",
    grad_accumulation_fusion=False,
    bias_fusion=False,
    two_pass_norm_backward=True,
    hidden_dropout=True,
    main_grad_bytes=2,
    loss_scaling=True,
    overlap_p2p=False,
    pipeline_scatter_gather=True,
    deallocate_pipeline_outputs=False,
    gemm_rate_factor=CUDA11_GEMM_RATE_FACTOR,
    grad_nan_check=False,
    tp_dgrad_overlap=False,
    plan_features=frozenset(),
    ddp_gradient_copy=True,
    sustained_gemm_rate_factor=1.0,
    allocator_fragmentation=MEGATRON_2021_FRAGMENTATION,
    step_gradient_copy=True,
    stale_main_grad=True,
)
"""Megatron-LM as the SC21 runs used it (see the module docstring): unfused attention with
the fused scale-mask-softmax, apex layer norm, hidden dropout 0.1, gradients added into the
fp16 ``param.grad`` by autograd (local DDP without contiguous buffers), unfused QKV bias,
fp16 loss scaling, blocking pipeline sends with the scatter/gather optimisation and the
sent outputs kept until their backward, the fp32 gradient copy of its optimizer step
(`ExecutionOptions.step_gradient_copy`), the allocator fragmentation its published runs
imply (`MEGATRON_2021_FRAGMENTATION`), and the CUDA 11 cuBLAS
(`CUDA11_GEMM_RATE_FACTOR`), whose sourced rate stands alone: the fitted sustained factor
(`costmodel.fitted_rates`) does not multiply it (`sustained_gemm_rate_factor` 1).
None of `PLAN_FEATURES` existed in that code (NVIDIA/Megatron-LM
at the ``examples/sc21`` commit, 2021-08, `megatron/arguments.py`): tensor, pipeline
(interleaved with pp > 2) and data parallelism, full recompute (``uniform`` or ``block``),
layers divided evenly over the stages, and PyTorch DDP (overlapped, 25 MB buckets, with its
bucket copy of the gradients: `ExecutionOptions.ddp_gradient_copy`) or Megatron's local DDP
(with the previous iteration's gradients held until the pipeline flush:
`ExecutionOptions.stale_main_grad`)."""

DEEPSPEED_ZERO3_2021 = dataclasses.replace(
    MEGATRON_2021,
    param_gather_engine="deepspeed_zero3",
    plan_features=frozenset({"megatron_fsdp"}),
)
"""Megatron-LM's 2021 model code (`MEGATRON_2021`: its kernels, fp16 gradients, the CUDA 11
cuBLAS, the allocator of PyTorch 1.8) run by DeepSpeed's ZeRO stage-3 engine of 2021
(`ExecutionOptions.param_gather_engine` ``deepspeed_zero3``), as Narayanan et al. 2021 (SC21,
arXiv 2104.04473, Table 2) compare it: "ZeRO-3 without model parallelism". A plan priced
with it shards weights, gradients and optimizer state over the data-parallel group
(`ParallelPlan.use_megatron_fsdp` with ``optim_grads_params``, the only plan feature here);
DeepSpeed's defaults of that time hold: fp16 gradient reduce-scatter in every backward
(``allreduce_always_fp32`` False, `ExecutionOptions.main_grad_bytes` 2), the fp32 copy of
the shard's gradients at the step (``_prepare_fp32_grad_for_sub_group`` in
``deepspeed/runtime/zero/stage3.py``, `ExecutionOptions.step_gradient_copy`). The fields of
`MEGATRON_2021` that describe Megatron-LM's own DDP (``ddp_gradient_copy``,
``stale_main_grad``) and pipeline sends do not act on such a plan (pp 1, sharded
gradients)."""

MEGATRON_2023 = ExecutionOptions(
    bias_fusion=False,
    two_pass_norm_backward=True,
    hidden_dropout=True,
    overlap_p2p=False,
    pipeline_scatter_gather=True,
    grad_nan_check=False,
    plan_features=frozenset({"sequence_parallel", "selective_recompute", "distributed_optimizer"}),
)
"""Megatron-LM of early 2023 (commit 285068c8 of 2023-01-11, the baseline of Jiang et al.
2024, MegaScale, arXiv 2402.15627) with bf16: the local transformer (no Transformer Engine:
`--transformer-impl local` is the default) with the FlashAttention that this commit merges
(`--use-flash-attn`; the stored A100 curve is FlashAttention-2's, a faster kernel, which
at sequence 2048 carries a few percent of a layer's time), apex layer norm, hidden dropout 0.1
(`--hidden-dropout` default), the QKV bias added after ``torch.matmul`` in
`LinearWithGradAccumulationAndAsyncCommunication`, blocking pipeline sends (no
`overlap_p2p_comm` yet); gradient-accumulation fusion and fp32 main gradients as today
(bf16 forces `accumulate_allreduce_grads_in_fp32`). Gradient reduction is not overlapped
(no `--overlap-grad-reduce` yet): a plan property, set by the caller. Of `PLAN_FEATURES`
that commit's `megatron/arguments.py` has `--sequence-parallel`, `--recompute-granularity`
(selective) and `--use-distributed-optimizer` only."""

TORCH_OPTIONS = ExecutionOptions(runtime="torch")
"""paraplan's executor (`executor/`; `costmodel.runtimes.torch`)."""


def runtime_options(runtime: str) -> ExecutionOptions:
    """The options of a runtime by name: Megatron-LM's current defaults for ``megatron``,
    `TORCH_OPTIONS` for ``torch``; another name raises `SpecError`."""
    if runtime not in RUNTIMES:
        raise SpecError(
            f"unknown runtime {runtime!r}; valid: {', '.join(RUNTIMES)} (megatron for "
            "exported Megatron-LM plans, torch for paraplan's executor)"
        )
    return TORCH_OPTIONS if runtime == "torch" else DEFAULT_OPTIONS


NON_TN_FP8_GENERATIONS: frozenset[str] = frozenset(("blackwell", "blackwell_ultra"))
"""`DeviceSpec.generation` names whose FP8 GEMMs take any layout: Transformer Engine's
``is_non_tn_fp8_gemm_supported`` (``transformer_engine/pytorch/utils.py``) is True for
compute capability 10.x (B200 and GB200 10.0, B300 and GB300 10.3) and from 13.0, False on
Hopper (9.0) and Ada (8.9)."""


def device_options(options: ExecutionOptions, profile: HardwareProfile) -> ExecutionOptions:
    """``options`` with the fields left to the device resolved for ``profile``:
    ``fp8_tn_gemm_only`` (when None) is False on the `NON_TN_FP8_GENERATIONS`, True on every
    other device (a device of unknown generation keeps Hopper's layout)."""
    if options.fp8_tn_gemm_only is not None:
        return options
    tn_only = profile.device.generation not in NON_TN_FP8_GENERATIONS
    return dataclasses.replace(options, fp8_tn_gemm_only=tn_only)


def framework_profile(profile: HardwareProfile, options: ExecutionOptions) -> HardwareProfile:
    """``profile`` as the framework's kernels see it: every GEMM efficiency point times
    ``options.gemm_rate_factor`` (`ExecutionOptions.gemm_rate_factor`), fp8 points also times
    the FP8 rate factor of the profile's generation or ``options.fp8_gemm_rate_factor``
    (`costmodel.fitted_rates.fp8_gemm_rate_factor`), fp4 points the FP4 factor
    (`costmodel.fitted_rates.fp4_gemm_rate_factor`), bf16 and fp16 points also times the
    sustained rate factor (`costmodel.fitted_rates.sustained_gemm_rate_factor`), and with
    ``options.flash_attention_version`` 2 the attention curves of an FA3 profile at FA2's
    rate (`fa2_attention_curves`); the profile itself when none of these applies to its
    curves or the runtime is paraplan's executor."""
    if options.runtime == "torch":
        return profile
    factor = options.gemm_rate_factor
    by_dtype = dict.fromkeys(profile.compute.gemm_efficiency, 1.0)
    if "fp8" in by_dtype:
        by_dtype["fp8"] = fp8_gemm_rate_factor(profile, options.fp8_gemm_rate_factor)
    if "fp4" in by_dtype:
        by_dtype["fp4"] = fp4_gemm_rate_factor(profile, options.fp4_gemm_rate_factor)
    sustained = sustained_gemm_rate_factor(profile, options.sustained_gemm_rate_factor)
    by_dtype.update({d: sustained for d in SUSTAINED_DTYPES if d in by_dtype})
    fa2 = options.flash_attention_version == 2 and profile.compute.attention_kernel.startswith(
        FA3_CURVE_PREFIX
    )
    if factor == 1.0 and set(by_dtype.values()) <= {1.0} and not fa2:
        return profile
    curves = {
        dtype: tuple(
            EfficiencyPoint(gflop=p.gflop, efficiency=p.efficiency * factor * by_dtype[dtype])
            for p in points
        )
        for dtype, points in profile.compute.gemm_efficiency.items()
    }
    attention = fa2_attention_curves(profile.compute.attention) if fa2 else None
    compute = dataclasses.replace(
        profile.compute,
        gemm_efficiency=curves,
        attention=attention if attention is not None else profile.compute.attention,
    )
    return dataclasses.replace(profile, compute=compute)
