"""How the training framework runs a plan, beyond the plan's own switches.

A `ParallelPlan` says what is split and overlapped; `ExecutionOptions` says which runtime
runs it and which kernels and conventions that runtime brings. Two runtimes exist
(`costmodel.runtimes`): ``megatron``, Megatron-core with Transformer Engine (the default:
fused bias epilogues, fp32 main gradients, asynchronous interleaved pipeline sends), and
``torch``, paraplan's own executor (`executor/`: eager PyTorch, DTensor tensor
parallelism, torch.distributed.pipelining, DDP or FSDP2), priced operator by operator.

Only the class and its fields (each documented under it) live here, its first fields in
`costmodel.execution_kernels`. The valid field values
and the rules ``__post_init__`` applies (`check_options`) are in `costmodel.execution_rules`;
the records read off the fields (optimizer precision, FP8 weight storage, the attention's FP8
recipe) in `costmodel.execution_derived`; the options of named stacks (Megatron-LM today, in
2021 and in 2023, the executor) and of a device in `costmodel.execution_presets`; the
`plan.json` form in `costmodel.execution_record`.
"""

from __future__ import annotations

from dataclasses import dataclass

from costmodel.execution_kernels import KernelConventions
from costmodel.execution_rules import (
    PLAN_FEATURES,
    MoeDispatcher,
    ParamGatherEngine,
    Runtime,
    TpOverlapRsMethod,
    check_options,
)
from costmodel.memory_allowances import Fp8Recipe
from costmodel.optimizer_state import OptimizerDtype
from costmodel.vocab_activations import CrossEntropyFusion


@dataclass(frozen=True, kw_only=True, slots=True)
class ExecutionOptions(KernelConventions):
    """Kernel and communication conventions of the training framework: the fields of
    `costmodel.execution_kernels.KernelConventions` (kernels, fusions, pipeline sends, GEMM
    rate factors, MoE launch and token times), then these."""

    moe_dispatcher: MoeDispatcher = "alltoall"
    """Megatron-core's MoE token dispatcher (`--moe-token-dispatcher-type`): ``alltoall``
    (permute, NCCL all-to-all of every (token, expert) row, sort by local expert) or
    ``flex`` (DeepEP / HybridEP: each token sent once per destination rank and, across
    scale-up domains, once per remote domain) or ``allgather`` (every rank gathers all
    tokens of the EP group and reduce-scatters the combined outputs);
    `costmodel.runtimes.megatron.moe_costs`."""

    moe_load_imbalance: float = 1.0
    """Tokens the most loaded expert-parallel rank receives over the mean, under dropless
    routing (>= 1). That rank's experts, permutations and all-to-all set the pace of every
    MoE layer (`costmodel.runtimes.megatron.moe_costs.moe_shape`); 1 is balanced routing, as
    the Megatron-Bridge benchmarks force (`moe_router_force_load_balancing`). With a capacity
    factor (`ModelSpec.moe_capacity_factor`) every expert is priced at capacity instead."""

    tp_dgrad_overlap: bool = True
    """Without `tp_comm_overlap`, the backward reduction of a column-parallel layer's input
    gradient (reduce-scatter with sequence parallelism, all-reduce without) runs
    asynchronously under the layer's weight-gradient GEMM (Transformer Engine's linear
    modules; Megatron-LM `LinearWithGradAccumulationAndAsyncCommunication` from 2022).
    False: Megatron-LM 2021 reduced it synchronously (`mpu/mappings.py` autograd
    functions, no ``async_op``)."""

    grad_nan_check: bool = True
    """Megatron-core checks every gradient bucket for NaN before reducing it (the norm of
    the bucket: `costmodel.optimizer_passes.grad_buffer_passes_time_s`), on by default
    (``--check-for-nan-in-loss-and-grad``); the data-parallel wrappers of 2021-2023 had no
    such check."""

    flash_attention_version: int = 3
    """Generation of the fused attention kernels the framework's stack runs. 3: kernels that
    use Hopper's asynchronous tensor-core pipelines (FlashAttention-3, which Transformer
    Engine integrates from v1.11, 2024-10), the curves of the H100-class profiles as stored.
    2: FlashAttention-2-class kernels, which use none of those features; on a profile whose
    curves are FA3's (`costmodel.flash_attention2.FA3_CURVE_PREFIX`) every attention point is
    scaled by the FA2/FA3 ratio the FA3 paper measures on H100
    (`costmodel.flash_attention2.FA2_OVER_FA3_H100`); a profile whose curves are FA2's already
    (A100) is unchanged. Stacks from before FA3 (released 2024-07) run 2 (docs/cost-model.md
    states what this assumes for Transformer Engine's cuDNN path)."""
    plan_features: frozenset[str] = PLAN_FEATURES
    """Plan features the framework implements (names in
    `costmodel.execution_rules.PLAN_FEATURES`). The planner searches only plans that use these
    (`planner.space.SearchSpace.features`); the cost of a plan is not affected."""

    runtime: Runtime = "megatron"
    """Who runs the step: ``megatron`` (Megatron-core with Transformer Engine; the fields
    above) or ``torch`` (paraplan's executor: every operator's kernel and host cost,
    DTensor, DDP/FSDP2, torch pipelining; `costmodel.runtimes.torch`), for which the
    fields above are not consulted."""
    ddp_gradient_copy: bool = False
    """Overlapped gradient reduction (`ParallelPlan.overlap_grad_reduce`) runs through
    PyTorch's DistributedDataParallel, whose reducer keeps its own bucket copy of every
    gradient beside ``param.grad``: one more gradient buffer of `main_grad_bytes` per
    parameter on every rank (`costmodel.memory.memory_per_stage`). PyTorch documents the
    copy under ``gradient_as_bucket_view`` (default False: "the saved memory size will be
    equal to the total gradients size" when True). Megatron-LM 2021 with ``--DDP-impl
    torch`` wraps the model in ``torch.nn.parallel.DistributedDataParallel`` without that
    argument (`megatron/training.py`, ``get_model``, at the ``examples/sc21`` commit
    de7dc40); Megatron-core's own DDP reduces its contiguous buffer in place (False)."""

    cuda_graph_scopes: frozenset[str] = frozenset()
    """Parts of each layer captured in CUDA graphs (names in
    `costmodel.execution_rules.CUDA_GRAPH_SCOPES`; Megatron-core ``--cuda-graph-impl
    transformer_engine|local`` with ``--cuda-graph-scope``). A captured part is replayed as
    one graph launch, forward and backward, so its kernels cost no host launch time: the MoE
    host-launch floor loses the launches of the captured scopes
    (`costmodel.runtimes.megatron.moe_launches.captured_moe_launches`). Kernel times are
    unchanged. Per-layer graphs at pp > 1 hold a static copy of each received chunk input
    per in-flight microbatch (`costmodel.cuda_graph_memory.graph_input_copy_bytes`).
    Empty: eager execution."""

    tp_overlap_rs_method: TpOverlapRsMethod = "pipeline"
    """Transformer Engine userbuffers method of the reduce-scatter after the row-parallel
    forward GEMMs (``proj_fprop``, ``fc2_fprop``) under `ParallelPlan.tp_comm_overlap`
    (`costmodel.runtimes.megatron.userbuffers.tp_overlap_pair_s`). ``pipeline``:
    ``initialize_ub``'s default (4 GEMM chunks on SMs - 16, each chunk's NCCL-style
    reduce-scatter under the next, the last one exposed). ``ring_exchange``: tp GEMM chunks,
    each partial output sent to its owner by a copy-engine step under the next chunk, then
    one reduction kernel; what every FP8 Llama configuration of Megatron-Bridge sets
    (``RingExchangeOverlapCfg(num_sm=1, set_sm_margin=True)`` for both GEMMs in
    ``userbuffers_fp8_*`` of ``src/megatron/bridge/training/comm_overlap.py``)."""
    tp_overlap_bulk_sm_margin: bool = True
    """Whether the ``bulk`` userbuffers overlaps (the all-gather under ``qkv_dgrad`` /
    ``fc1_dgrad``, the reduce-scatter under ``qkv_wgrad`` / ``fc1_wgrad``) reserve their
    communication SMs for the whole GEMM (``set_sm_margin``; ``initialize_ub`` default True:
    the GEMM runs on SMs - num_sm, ``_math_sms`` in
    `transformer_engine/common/comm_gemm_overlap/comm_gemm_overlap.cpp`). False: the GEMM is
    launched on every SM and the communication kernel shares them only while it runs; every
    Llama configuration of Megatron-Bridge sets ``BulkOverlapCfg(..., set_sm_margin=False)``
    (``src/megatron/bridge/training/comm_overlap.py``). Transformer Engine before v2.0
    (2025-02) registered every method without the margin (``add_ub(..., set_sm_margin=0)``
    and ``ub_cfg.get("set_sm_margin", 0)`` in ``initialize_ub``,
    `transformer_engine/pytorch/module/base.py` v1.7 to v1.13); v2.0 made it
    ``not method == "ring_exchange"``."""

    tp_overlap_pipeline_sm_margin: bool = True
    """Whether the ``pipeline`` reduce-scatter overlap of the row-parallel forward GEMMs
    (``proj_fprop``, ``fc2_fprop``) runs its GEMM chunks on SMs - num_sm (``set_sm_margin``;
    ``initialize_ub`` default True from Transformer Engine v2.0, False before it: v1.7 to
    v1.13 register every method with ``set_sm_margin=0``). False: the chunks keep every SM
    and share them with the reduce-scatter kernel only while it runs
    (`costmodel.runtimes.megatron.userbuffers.tp_overlap_pair_s`)."""

    cross_entropy_fusion: CrossEntropyFusion = "unfused"
    """The loss's cross-entropy implementation, which sets what the last stage keeps of the
    logits (`costmodel.vocab_activations.logits_element_bytes`; memory only). ``unfused``:
    Megatron-core's default (``cross_entropy_loss_fusion = False`` in
    ``megatron/core/model_parallel_config.py``), an fp32 softmax per in-flight microbatch,
    as in Megatron-LM 2021 (``output.float()`` before ``vocab_parallel_cross_entropy``);
    ``native``: ``--cross-entropy-loss-fusion`` with ``--cross-entropy-fusion-impl native``,
    the same saved tensors; ``te``: ``--cross-entropy-fusion-impl te`` with Transformer
    Engine v2.2-v2.17, the gradient written into the bf16 logits, no fp32 copy (the
    Megatron-Bridge performance scripts set it: ``cross_entropy_fusion_impl = "te"`` with
    ``GPTProvider.cross_entropy_loss_fusion = True``; Megatron-LM's training arguments
    now reject it, "disabled due to stability issues", commit 168cb15d70);
    ``te_fp32_grad``: the same with Transformer Engine from v2.18, which keeps an fp32
    gradient."""

    expandable_segments: bool = False
    """The run sets ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`` (PyTorch's default is
    False): the caching allocator grows one virtual segment per stream and can unmap free
    physical pages at an out-of-memory retry, so it fragments less
    (`costmodel.memory_allowances.FrameworkAllowance.fragmentation`; memory only)."""

    moe_a2a_overlap: bool = False
    """Megatron-core's 1F1B all-to-all overlap (``--overlap-moe-expert-parallel-comm`` with
    ``--delay-wgrad-compute``; megatron/core/pipeline_parallel/combined_1f1b.py,
    megatron/core/models/common/model_chunk_schedule_plan.py
    ``TransformerLayerSchedulePlan.run``): in the steady 1F1B phase the forward of one
    microbatch and the backward of another run layer by layer as one step, the EP dispatch
    and combine of each on a communication stream under the other's attention and expert
    computation. It prices a MoE layer's exposed EP time by that two-stream step
    (`costmodel.runtimes.megatron.moe_a2a_overlap.a2a_overlapped_passes`). Megatron-core accepts it
    with ep > 1, the alltoall or flex dispatcher, no full recompute and, for pp > 1, an
    interleaved schedule; elsewhere it is not applied. Off: Megatron-core's default."""

    sustained_gemm_rate_factor: float | None = None
    """Multiplier, in (0, 1], on the profile's bf16 and fp16 GEMM efficiency for running
    them in a training step at full load rather than alone in a benchmark (power-limited
    clocks, communication kernels sharing the SMs; `costmodel.fitted_rates`), applied on top
    of `gemm_rate_factor`; fp8 curves are not touched. None: the fitted default of the
    profile's GPU generation (`costmodel.fitted_rates.sustained_gemm_rate_factor`); 1 keeps
    the benchmark rate."""

    fp8_recipe: Fp8Recipe = "delayed"
    """Transformer Engine's FP8 scaling recipe in fp8 runs (Megatron-core ``--fp8-recipe``,
    ``TransformerConfig.fp8_recipe``, default ``delayed``): ``delayed`` and ``tensorwise``
    (current) keep one scale per tensor, ``mxfp8`` one per 32 elements. Sets the bytes of
    TE's FP8 copy of each linear weight (`costmodel.memory_allowances.Fp8WeightStorage`; memory and
    the parameter all-gather) and the quantization of the GEMM operands: current scaling's
    amax pass (`costmodel.fp8_quantization.fp8_quantize_time_s`) and, with sequence parallelism,
    its TP amax all-reduce (`costmodel.runtimes.megatron.fp8_scaling`)."""

    fp8_attention: bool = False
    """Megatron-core ``fp8_dot_product_attention`` (Megatron-Bridge's recipes set it;
    Megatron-LM's ``arguments.py`` has no flag for it): in an fp8 job the fused attention
    core runs in FP8 with the recipe's scaling, forward and backward, priced on the
    profile's ``fp8`` (delayed, tensorwise) or ``mxfp8`` attention curves, and saves its
    Q, K, V and output in that FP8 form (`costmodel.fp8_attention`, which states what is
    not priced). Refused outside an fp8 job, without the curves, with the ``materialized``
    kernel, FlashAttention-2-class kernels or the ``torch`` runtime. False: bf16 attention
    (Megatron-core's default)."""

    first_last_layers_bf16: bool = False
    """Megatron-core ``--first-last-layers-bf16`` (``TransformerConfig.first_last_layers_bf16``,
    default False): in an fp8 or nvfp4 job the first `num_layers_at_start_in_bf16` and the
    last `num_layers_at_end_in_bf16` decoder layers, counted over the whole model across
    pipeline and virtual stages, run outside Transformer Engine's quantization context
    (``megatron/core/fp8_utils.py`` ``is_first_last_bf16_layer``,
    ``megatron/core/fp4_utils.py`` ``get_fp4_context``) and build their weights outside
    its quantized model init: their GEMMs, attention, saved activations and weights are a
    bf16 job's (`costmodel.bf16_layers`). MTP depths are not among them. Refused outside
    fp8 and nvfp4 jobs, with the ``delayed`` recipe, and with more bf16 layers than the
    model has (`costmodel.bf16_layer_rules.check_bf16_layers`). Megatron runtime only."""
    num_layers_at_start_in_bf16: int = 1
    """Megatron-core ``--num-layers-at-start-in-bf16`` (default 1): the first decoder layers
    kept in bf16 under `first_last_layers_bf16`; read only with it."""
    num_layers_at_end_in_bf16: int = 1
    """Megatron-core ``--num-layers-at-end-in-bf16`` (default 1): the last decoder layers
    kept in bf16 under `first_last_layers_bf16`; read only with it."""

    fp8_param: bool = False
    """Megatron-core ``--fp8-param-gather`` (``TransformerConfig.fp8_param``, Megatron-Bridge
    ``fp8_param_gather``; default False): the linear weights are FP8 parameters built
    under TE's ``fp8_model_init``, the fp32 master copy lives in the optimizer and the
    data-parallel all-gather moves FP8 bytes (`costmodel.memory_allowances.Fp8WeightStorage`).
    False: bf16 parameters, with TE's FP8 copy of each cached across microbatches."""

    fp4_param: bool = True
    """Megatron-core ``--fp4-param-gather`` (``TransformerConfig.fp4_param``; Megatron-Bridge
    ``fp4_param_gather``, True in its ``bf16_with_nvfp4_mixed`` recipe, hence the default
    here; Megatron-core's own default is False), read in nvfp4 jobs only: the linear
    weights are NVFP4 parameters, the fp32 master copy lives in the optimizer and the
    data-parallel all-gather moves NVFP4 bytes
    (`costmodel.memory_allowances.Fp8WeightStorage`). False: bf16 parameters, with TE's
    NVFP4 copy of each cached across microbatches."""

    nvfp4_fused_rht_cast: bool = True
    """Transformer Engine writes both NVFP4 copies of an activation or gradient operand in
    one kernel that reads the bf16 operand once (``nvte_quantize_with_hadamard_transform``:
    the row-wise cast and the Random Hadamard Transform of the column-wise one; TE v2.14
    on, Megatron-Bridge 26.04 and later), the default. False: TE v2.12 and v2.13
    (Megatron-Bridge 26.02, pin 5671fd36) run the row-wise cast (``nvte_quantize_v2``) and
    the column-wise one (``nvte_hadamard_transform_cast_fusion_columnwise``) as two
    kernels, each reading the operand (``NVFP4Quantizer::quantize_impl``,
    `pytorch/csrc/quantizer.cpp`; `costmodel.fp8_quantization.fp8_cast_bytes_per_element`).
    Read in nvfp4 jobs only, by the quantization of the dense linear pairs."""

    fp8_tn_gemm_only: bool | None = None
    """The device's FP8 GEMMs take only the TN layout, so TE keeps a transposed copy of each
    per-tensor-scaled FP8 weight for the dgrad GEMM: True on Hopper (compute capability 9.0),
    False on Blackwell and Blackwell Ultra (10.x; TE ``is_non_tn_fp8_gemm_supported``). None
    (the default): the priced device's (`costmodel.execution_presets.device_options`, which
    `estimate_plan` and the screen apply); a bool overrides it. Memory, and the transposes
    of gathered per-tensor FP8 copies under sequence parallelism
    (`costmodel.fp8_quantization.fp8_gather_transpose_time_s`)."""

    cudnn_norm: bool = False
    """Transformer Engine's norm kernels run on cuDNN: the launch sets
    ``NVTE_NORM_FWD_USE_CUDNN=1`` and ``NVTE_NORM_BWD_USE_CUDNN=1`` (Megatron-Bridge's
    performance scripts set both in ``scripts/performance/utils/executors.py``
    ``PERF_ENV_VARS``, tags v0.1.0rc4 to v0.5.x, and keep them for some recipes only:
    `bench/norm_recipes.py`). In fp8 runs it changes how TE quantizes the norm output of a
    ``LayerNormLinear`` (`costmodel.fp8_quantization.norm_quantization`, TE v2.8 to v2.18
    ``pytorch/csrc/extensions/normalization.cpp``): MXFP8 gets the fused norm + quantize
    kernel, current scaling loses the norm's amax output and runs a full amax pass; delayed
    scaling is fused either way. Time only: what is saved for backward does not change.
    False: TE's own norm kernels (its default). Megatron runtime only."""

    moe_fused_grouped_mlp: bool = False
    """The routed experts run as Transformer Engine's fused grouped MLP (Megatron-core
    ``use_transformer_engine_op_fuser`` with ``NVTE_CUTEDSL_FUSED_GROUPED_MLP=1``, MXFP8 on
    compute capability 10.x: `transformer_engine/pytorch/ops/fused/forward_grouped_mlp.py`
    and ``backward_grouped_mlp.py`` from TE v2.16; Megatron-Bridge
    ``cutedsl_fused_grouped_mlp``): one grouped GEMM kernel per projection over every local
    expert, the SwiGLU and the quantization of FC2's input in FC1's epilogue, the SwiGLU
    backward and the quantization of FC1's output gradient in FC2's dgrad epilogue, and the
    split sizes read on the device. It removes the per-expert launches and quantization
    kernels and the activation passes
    (`costmodel.runtimes.megatron.moe_experts.expert_fp8_quantize_s`,
    `costmodel.runtimes.megatron.moe_experts.expert_launches`), and, for biased experts,
    ``TEGroupedMLP``'s expert-by-expert FC2 bias
    (`costmodel.runtimes.megatron.unfused_costs.expert_fc2_bias_time_s`). False: TE
    ``GroupedLinear``, one cuBLAS GEMM and one quantization per expert."""

    rope_fusion: bool = True
    """Rotary embeddings run Transformer Engine's fused kernel (Megatron-core
    ``apply_rope_fusion``). False: Megatron-core's unfused PyTorch chain, which it takes
    whenever the YaRN attention factor is not 1 even with the fusion requested (GPT-OSS:
    megatron/core/models/common/embeddings/rope_utils.py ``apply_rotary_pos_emb``); priced
    by `costmodel.runtimes.megatron.unfused_costs.rope_time_s`."""

    allocator_fragmentation: float | None = None
    """Share of the dynamic (activation and communication) bytes added for the caching
    allocator's fragmentation, replacing
    `costmodel.memory_allowances.FrameworkAllowance.fragmentation` of the allocator mode; None
    keeps that default. `costmodel.execution_presets.MEGATRON_2021` sets
    `costmodel.execution_presets.MEGATRON_2021_FRAGMENTATION`. Memory only."""

    step_gradient_copy: bool = False
    """The optimizer step first copies every 16-bit main gradient of the rank into a new fp32
    tensor, which lives until the next iteration's ``zero_grad``: Megatron-LM 2021's
    ``Float16OptimizerWithFloat16Params._copy_model_grads_to_main_grads`` sets
    ``main_param.grad = model_param.main_grad.float()`` (local DDP) or
    ``model_param.grad.float()`` (PyTorch DDP), and ``zero_grad(set_to_none=True)`` runs at
    the start of ``train_step`` (``megatron/optimizer/optimizer.py``, ``megatron/training.py``
    at the ``examples/sc21`` commit de7dc40). The copy exists after the backward has freed the
    activations, so it sets a second peak of the rank: weights, gradients, optimizer state, 4
    bytes per locally stepped parameter and the fixed allowance
    (`costmodel.model_state.step_peak_bytes`); with fp32 main gradients ``.float()`` returns the
    tensor itself and nothing is copied. False: not counted.
    `costmodel.execution_presets.MEGATRON_2021` sets it. Memory only."""

    precision_aware_optimizer: bool = False
    """Megatron-LM ``--use-precision-aware-optimizer``: Transformer Engine's ``FusedAdam``
    keeps Adam's state in the dtypes below, fewer bytes per parameter in memory and in the
    optimizer step (`costmodel.optimizer_state`: its table of bytes per parameter and
    sources). Megatron-core accepts it only with the distributed optimizer or Megatron-FSDP
    (`costmodel.optimizer_state.precision_aware_unmet`); `costmodel.memory` raises for
    another plan. Off: Megatron-core's default. Megatron runtime only."""
    exp_avg_dtype: OptimizerDtype = "fp32"
    """Megatron-LM ``--exp-avg-dtype``: storage of Adam's first moment (fp32, fp16, bf16,
    fp8); other than fp32 only with `precision_aware_optimizer`."""
    exp_avg_sq_dtype: OptimizerDtype = "fp32"
    """Megatron-LM ``--exp-avg-sq-dtype``: storage of Adam's second moment (as
    `exp_avg_dtype`)."""
    main_params_dtype: OptimizerDtype = "fp32"
    """Megatron-LM ``--main-params-dtype``: storage of the master weights (fp32 or fp16;
    fp32 master weights of bf16 parameters are kept as 16-bit remainders); other than
    fp32 only with `precision_aware_optimizer`. Megatron-LM's ``--main-grads-dtype bf16``
    is `main_grad_bytes` 2."""

    # ---- optimizer CPU offload (`costmodel.optimizer_offload`) ----
    optimizer_cpu_offload_fraction: float = 0.0
    """Share, in [0, 1], of each rank's optimizer shard whose fp32 master weights and Adam
    m and v live in host memory and whose Adam step runs on the host (Megatron-core
    ``--optimizer-cpu-offload`` with ``--optimizer-offload-fraction``, whose default is 1;
    ``HybridDeviceOptimizer``). That share of the optimizer-state bytes leaves the device
    (`costmodel.memory.memory_per_stage`); the step adds the gradient and parameter copies
    over the host link and the host's Adam (`costmodel.optimizer_offload`). 0: off,
    Megatron-core's default. Needs `precision_aware_optimizer` (Megatron-LM
    ``arguments.py``; `costmodel.optimizer_offload.check_offload_fields`), hence the
    distributed optimizer (`costmodel.optimizer_offload.offload_violations`), and, with FP8
    parameters, the ``delayed`` recipe. Under offload Adam's state is fp32 on the device
    and on the host whatever `exp_avg_dtype`, `exp_avg_sq_dtype` and `main_params_dtype`
    say (`costmodel.optimizer_state.adam_state_bytes`)."""
    overlap_cpu_optimizer_d2h_h2d: bool = False
    """Megatron-core ``--overlap-cpu-optimizer-d2h-h2d``: with CPU offload, one host
    optimizer per parameter and the copies on their own streams, so the copies overlap the
    host's Adam parameter by parameter (`costmodel.optimizer_offload.host_optimizer_step_s`).
    False: copy, step, copy in series. No effect without offload."""
    stale_main_grad: bool = False
    """Gradient reduction without overlap (`ParallelPlan.overlap_grad_reduce` False) runs
    through Megatron-LM 2021's local DDP without contiguous buffers, which keeps the previous
    iteration's 16-bit gradients alive through the next forward and backward: one more
    gradient of `main_grad_bytes` per parameter on every rank while the activations are held
    (`costmodel.model_state.held_gradient_copies`; not with sharded optimizer state, which that
    code did not have). ``allreduce_gradients`` points ``param.main_grad = param.grad`` for
    every parameter (``megatron/model/distributed.py``, the branch without ``_grad_buffers``);
    the next ``train_step`` starts with ``optimizer.zero_grad()``, whose ``set_to_none`` sets
    ``param.grad = None`` only (``_zero_grad_group_helper``,
    ``megatron/optimizer/optimizer.py``), so the old tensor stays referenced by
    ``param.main_grad`` while the backward allocates new ``param.grad`` tensors, until
    ``allreduce_gradients`` points ``main_grad`` at them after the pipeline flush. The
    optimizer step therefore sees one 16-bit copy (`costmodel.model_state.step_peak_bytes`).
    Source: NVIDIA/Megatron-LM at the ``examples/sc21`` commit de7dc40 (tag v2.5), whose
    ``--use-contiguous-buffers-in-ddp`` is off by default and unset by the SC21 scripts
    (``examples/sc21/CONFIG.sh``); v2.6 made contiguous buffers the default for local DDP.
    `costmodel.execution_presets.MEGATRON_2021` sets it. Memory only."""

    param_gather_engine: ParamGatherEngine = "megatron_fsdp"
    """The engine that runs a plan whose weights are sharded over the data-parallel group
    (`ParallelPlan.use_megatron_fsdp` with ``optim_grads_params``): ``megatron_fsdp``
    (Megatron-FSDP: two whole layers gathered at once, one gather per forward and per
    backward pass, `costmodel.runtimes.megatron.megatron_fsdp`) or ``deepspeed_zero3``
    (DeepSpeed's stage-3 engine of 2021, microsoft/DeepSpeed v0.3.13 to v0.5.x: gathers
    per linear module, again in the recompute forward of full recompute, and again before
    the backward for the modules its reuse distance releases,
    `costmodel.runtimes.megatron.zero3_schedule`). The sharding itself, the gradient
    reduce-scatters and the sharded Adam step are priced alike. Dense decoders of standard
    attention only with ``deepspeed_zero3``; no effect on plans without sharded weights.
    Megatron runtime only."""

    def __post_init__(self) -> None:
        """The field rules (`costmodel.execution_rules.check_options`)."""
        check_options(self)
