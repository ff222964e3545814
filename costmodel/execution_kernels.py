"""The first fields of `costmodel.execution.ExecutionOptions`: the kernels the framework
runs and the conventions that differ between Megatron-LM generations (attention kernel,
gradient-accumulation and bias fusions, the norm backward, dropout, main-gradient bytes,
fp16 loss scaling, pipeline sends and output deallocation), the rate factors on the
profile's GEMM curves, and the host launch and device times of a MoE layer.

`ExecutionOptions` inherits them, so they come first in its field order (the order of
`plan.json` records and exported arguments); its ``__post_init__`` applies the rules of
every field (`costmodel.execution_rules.check_options`).
"""

from __future__ import annotations

from dataclasses import dataclass

from costmodel.compute import AttentionKernelName as AttentionKernel
from costmodel.fitted_rates import MOE_EXPERT_LAUNCH_S, MOE_HOST_LAUNCH_S, MOE_TOKEN_DEVICE_S


@dataclass(frozen=True, kw_only=True, slots=True)
class KernelConventions:
    """Kernels, fusions, pipeline-send conventions, GEMM rate factors and MoE launch and
    token times of the training framework (module docstring)."""

    attention: AttentionKernel = "flash"
    """Attention implementation (`costmodel.compute`): fused ``flash`` (Megatron-LM with
    Transformer Engine) or ``materialized`` (unfused softmax, Megatron-LM before 2022)."""
    grad_accumulation_fusion: bool = True
    """Megatron-LM `--gradient-accumulation-fusion` (on by default with TE/APEX): weight-
    gradient GEMMs accumulate straight into the main gradient. Off, every microbatch's
    backward adds a memory-bound pass over the stage's parameters
    (`costmodel.optimizer_passes.grad_accumulation_time_s`)."""
    bias_fusion: bool = True
    """Linear biases ride in the GEMM epilogues (Transformer Engine adds the bias in the
    forward GEMM and reduces its gradient in the dgrad GEMM). False: PyTorch <= 1.10
    `F.linear` on a 3-D input runs matmul then a separate in-place bias add, and autograd
    reduces every bias gradient over the tokens in its own kernel
    (`costmodel.compute.bias_time_s`). Megatron-LM 2021 fused only the bias+GeLU and
    bias+dropout+add pairs, so the QKV bias add stays a separate pass."""
    two_pass_norm_backward: bool = False
    """apex `FusedLayerNorm` (Megatron-LM 2021): the norm backward reads its input and
    output gradient twice (weight-gradient partial sums, then the input gradient), 5·e
    bytes per element instead of Transformer Engine's single pass of 3·e
    (`costmodel.compute.norm_time_s`)."""
    hidden_dropout: bool = False
    """The run applies dropout on the residual branches (Megatron-LM's `--hidden-dropout`,
    0.1 by default and in the SC21 runs; current Llama-style recipes set 0). `ModelSpec`
    carries no dropout, so the framework conventions do: the bias-dropout-add writes a
    1-byte mask and its backward applies it before the residual gradients are summed
    (`costmodel.compute.residual_time_s`)."""
    main_grad_bytes: int = 4
    """Bytes per element of the main-gradient buffer, which is also what the data-parallel
    reduction carries: 4 with fp32 main gradients (Megatron turns
    `--accumulate-allreduce-grads-in-fp32` on with bf16, megatron-facts.md §5.2); 2 for
    fp16 runs without that flag (the SC21 runs: `main_grad` in the parameter dtype)."""
    loss_scaling: bool = False
    """fp16 with a loss scale (Megatron `FP16OptimizerWithFP16Params`): before Adam the fp16
    gradients are copied into fp32 main gradients and unscaled with an inf/NaN check, two
    more memory-bound passes (`costmodel.optimizer_passes.optimizer_step_time_s`)."""
    overlap_p2p: bool = True
    """Interleaved pipeline sends run asynchronously under compute (`overlap_p2p_comm`,
    the default since 2022). False: every send/receive is a blocking
    `batch_isend_irecv` followed by `torch.cuda.synchronize()` (Megatron-LM 2021
    `p2p_communication._communicate`, and `--no-overlap-p2p-communication` today), so it
    extends the sending action as under 1F1B."""
    pipeline_scatter_gather: bool = False
    """Megatron-LM 2021 `--scatter-gather-tensors-in-pipeline` (on by default then): each of
    the tp ranks sends 1/tp of the activation over its own NIC and the receivers rebuild it
    with an all-gather over the tensor-parallel group (Narayanan et al. 2021 §4.1). Off,
    every tp rank sends the whole [s, b, h] tensor (current Megatron without sequence
    parallelism)."""

    deallocate_pipeline_outputs: bool = True
    """Each pipeline stage frees the data of an output tensor once it is sent (Megatron's
    ``deallocate_output_tensor``, since 2022-01; `deallocate_pipeline_outputs` is forced
    on in ``core_transformer_config_from_args``, megatron-facts.md §3.4). False: the stage
    keeps every in-flight microbatch's output [s/cp, b, h] until its backward (Megatron-LM
    2021 `megatron/schedules.py`: ``output_tensors.append(output_tensor)``), one more
    activation per in-flight microbatch-chunk on every chunk but the model's last
    (`costmodel.activations.stage_activations`)."""

    gemm_rate_factor: float = 1.0
    """Multiplier, in (0, 1], on the profile's GEMM efficiency for the BLAS library the
    framework links (`costmodel.execution_presets.framework_profile`): 1 for the library the
    profile was measured or derived with,
    `costmodel.execution_presets.CUDA11_GEMM_RATE_FACTOR` for the CUDA 11 cuBLAS of the
    2020-2022 PyTorch containers on an A100. It scales every cuBLAS GEMM (linear layers, the
    materialized attention's batched GEMMs), not fused attention kernels or memory-bound
    operators."""

    fp8_gemm_rate_factor: float | None = None
    """Multiplier, in (0, 1], on the profile's fp8 GEMM efficiency for GEMMs run through
    Transformer Engine's FP8 recipes (`costmodel.execution_presets.framework_profile`). The
    profile's fp8 curve is the bare cuBLASLt rate on square shapes (MAMF); a training step's
    FP8 linear layers also cast and transpose their inputs and output gradients (priced apart,
    as memory-bound kernels, with current scaling's amax pass and TP amax all-reduce and
    delayed scaling's amax reduction and scale update at each ``fp8_autocast`` exit:
    `costmodel.fp8_quantization.fp8_quantize_time_s`, `costmodel.runtimes.megatron.fp8_scaling`),
    which NVIDIA's own guide puts at an end-to-end FP8 speedup of 1.2-1.5x over bf16
    (Megatron-Bridge ``docs/performance-guide.md``, "Low Precision Training") where the bare
    rates differ by about 1.8x. None (the default) takes the value fitted on published FP8
    runs for the profile's GPU generation (`costmodel.fitted_rates.fp8_gemm_rate_factor`:
    `FP8_GEMM_RATE_FACTORS`, else `FP8_GEMM_RATE_FACTOR`); a number overrides it for every
    generation; 1 keeps the bare rate. It also absorbs what the bf16 parts of small dense
    models miss, so it is a fitted figure, not a kernel rate."""

    fp4_gemm_rate_factor: float | None = None
    """Multiplier, in (0, 1], on the profile's fp4 GEMM efficiency for the GEMMs of an nvfp4
    job (Transformer Engine's ``NVFP4BlockScaling``), the counterpart of
    `fp8_gemm_rate_factor` (`costmodel.execution_presets.framework_profile`). None (the
    default): `costmodel.fitted_rates.fp4_gemm_rate_factor` of the profile's generation
    (fitted on published NVFP4 runs); a number overrides it; 1 keeps the profile's fp4
    curve."""

    moe_host_launch_s: float = MOE_HOST_LAUNCH_S
    """Host seconds per kernel launch of a Megatron-core MoE layer run eagerly (Python,
    PyTorch dispatch, Transformer Engine module logic and the CUDA launch), the price of
    `costmodel.runtimes.megatron.moe_launches.moe_host_launches`. A MoE layer pass lasts at
    least its launches' host time (`moe_launches.host_bound_s`; in a dropless forward, the
    launches after the token-count synchronization against the routed experts' kernels:
    `costmodel.runtimes.megatron.moe_experts.forward_host_floor_s`), which binds for
    fine-grained experts at small micro-batches; 0 turns the floor off (a fully
    graph-captured layer). A fitted figure (`MOE_HOST_LAUNCH_S`), not a measured launch
    latency. It prices the Python-level launches
    (`costmodel.runtimes.megatron.moe_launches.MoeLaunches.python`); those Transformer Engine
    issues per local expert from C++ take `moe_expert_launch_s`."""

    moe_expert_launch_s: float = MOE_EXPERT_LAUNCH_S
    """Host seconds per launch that Transformer Engine issues per local expert from C++
    inside one Python call of ``GroupedLinear`` (a cuBLASLt GEMM per expert in
    ``te_general_grouped_gemm``, a quantization per expert slice in ``split_quantize``:
    `costmodel.runtimes.megatron.moe_launches.MoeLaunches.expert`), added to the same host
    floor as `moe_host_launch_s`; 0 prices those launches at no host time. A value set before
    a fit (`costmodel.fitted_rates.MOE_EXPERT_LAUNCH_S`), not a measured launch latency."""

    moe_token_device_s: float = MOE_TOKEN_DEVICE_S
    """Device seconds per token of a MoE layer (forward and backward together, per token of
    the layer's rank, ``layer_shape.norm_tokens``) that no priced kernel accounts for, added
    to the MoE block as compute: a third in the forward (rerun with it under recompute), two
    thirds in the backward. A fitted figure (`costmodel.fitted_rates.MOE_TOKEN_DEVICE_S`),
    not a kernel time, stated for a device of 8,000 GB/s HBM and scaled to the profile's
    bandwidth (`costmodel.fitted_rates.token_device_s`); applied on GPU profiles only; 0
    turns it off."""
