"""Megatron-core's Muon optimizer: which parameters it steps, its state, its step time and
the parameter all-gather of its layer-wise distributed form.

Sources: NVIDIA/Megatron-LM at d7288711 (the ``3rdparty/Megatron-LM`` of Megatron-Bridge tag
v0.4.0, core_r0.17) and d0b3b775 (tag v0.5.0, core_r0.18); NVIDIA-NeMo/Emerging-Optimizers
``emerging_optimizers/orthogonalized_optimizers/`` (``muon_utils.py``,
``orthogonalized_optimizer.py``).

- **Which parameters.** ``get_megatron_muon_optimizer`` (d7288711 ``megatron/core/optimizer/
  muon.py``; d0b3b775 ``emerging_optimizers.py`` ``_is_nonlinear_or_embedding``) gives Muon
  every 2-D parameter that is not the embedding or the output layer: the attention and MLP
  projections, shared and routed experts (one matrix per expert, Transformer Engine's
  ``GroupedLinear`` ``weight0..N``) and the router, the MTP layers' matrices and each MTP
  weight set's ``eh_proj`` (`mtp_matrices`); norms and biases (1-D), the embedding, the
  MTP stage's embedding copy (``is_embedding_or_output_parameter``, set for
  ``pre_process or mtp_process`` in ``LanguageModule.setup_embeddings_and_output_layer``,
  d98e8a64) and the output layer take Adam (``--muon-scalar-optimizer`` default ``adam``).
- **State.** Muon keeps one ``momentum_buffer`` per parameter, ``zeros_like`` the fp32 main
  parameter that ``Float16OptimizerWithFloat16Params`` hands it: master 4 + momentum 4 = 8
  bytes per Muon parameter under bf16 or fp8 (4 in an fp32 run, stepped in place); the Adam
  part keeps its 12 (`costmodel.optimizer_state.adam_state_bytes`). The precision-aware
  optimizer is not supported ("TODO(boxiangw): support precision aware optimizer").
- **Sharding.** ``--optimizer muon`` steps every parameter on every rank. ``--optimizer
  dist_muon`` wraps all of it (Muon and Adam parts) in ``LayerWiseDistributedOptimizer``
  (``layer_wise_optimizer.py``): whole parameters are dealt out to the dp·cp ranks (routed
  experts to the expert-dp ranks) ping-pong in order of size, so each rank holds the state
  and runs the step of about 1/(dp·cp) of them; the gradients are all-reduced by
  Megatron-core's DDP as without a distributed optimizer (both forms refuse
  ``--use-distributed-optimizer``: "muon with dist optimizer is not supported"), and after
  the step every rank all-gathers the updated 16-bit parameters over the same groups
  (``allgather_params``; deferred into the forward only with ``--overlap-param-gather``):
  one ``torch.distributed.all_gather`` per group of each rank's flattened share at its own
  size, which PyTorch's NCCL backend runs as coalesced broadcasts (`uneven_gather_bytes`),
  into receive buffers that hold a second 16-bit copy of the group's parameters
  (`layerwise_gather_buffer_bytes`). `costmodel.muon_sharding` deals them as the code does
  and prices the rank with the most state.
- **Step.** Per Muon parameter (``OrthogonalizedOptimizer.step``): decoupled weight decay
  ``p.add_(p)``, ``exp_avg.lerp_(grad)``, Nesterov ``grad.lerp(exp_avg)``, then per matrix
  the Newton-Schulz orthogonalization (``newton_schulz``: Frobenius normalisation, a cast to
  bf16 at ``--muon-fp32-matmul-prec medium``, ``steps`` iterations, a cast back), the
  spectral scale (two multiplies) and ``p.add_(update)``; the wrapper then writes the
  16-bit model copy. `MUON_STEP_BYTES` adds those memory-bound passes. One parameter is
  stepped at a time; the tensors its update allocates on top of the resident state are
  `newton_schulz_working_bytes`.
- **Newton-Schulz.** ``--muon-num-ns-steps`` 5 with the ``quintic`` coefficient sets
  (5 sets, one per step): per step ``A = X·Xᵀ``, ``B = b·A + c·A·A``, ``X = a·X + B·X`` on
  the matrix transposed so that its rows are the smaller side m of m x n
  (`newton_schulz_flops`). ``--muon-tp-mode blockwise`` (Megatron-LM's and Megatron-
  Bridge's ``distributed_muon_with_cosine_annealing`` default) orthogonalizes each rank's
  tensor-parallel shard as it is, with no gather. ``--muon-split-qkv`` (default on)
  orthogonalizes Q, K and V of a fused ``linear_qkv`` apart; MLA has no fused QKV.
"""

from __future__ import annotations

from dataclasses import dataclass

from costmodel import compute as ops
from costmodel.collectives import collective_time_s
from costmodel.topology import GroupPlacement
from profiles.schema import HardwareProfile
from specs.attention_params import mla_head_dims
from specs.errors import SpecError
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.params import count_params
from specs.plan import ParallelPlan

MUON_OPTIMIZERS: tuple[str, ...] = ("muon", "dist_muon")
"""`TrainingJob.optimizer` values that run Muon (Megatron-LM ``--optimizer`` choices)."""

NS_STEPS = 5
"""Megatron-LM ``--muon-num-ns-steps`` default (``OptimizerConfig.muon_num_ns_steps``)."""

MUON_STEP_BYTES = 90
"""Bytes per Muon parameter that one step moves outside the Newton-Schulz GEMMs, fp32 state:
weight decay (read 4, write 4), momentum ``lerp_`` (read 8, write 4), Nesterov ``lerp``
(read 8, write 4), normalisation (norm read 4; divide read 4, write 4), bf16 cast (read 4,
write 2) and back (read 2, write 4), the spectral and extra scale (two multiplies, read 4
and write 4 each), the update ``p.add_`` (read 8, write 4) and the 16-bit model copy
(read 4, write 2)."""

MUON_KERNELS_PER_MATRIX = 12
"""Memory-bound kernels per orthogonalized matrix in `MUON_STEP_BYTES` (one each; the norm
counts two)."""

MUON_STATE_BYTES = 4
"""The fp32 ``momentum_buffer`` per Muon parameter."""


@dataclass(frozen=True, kw_only=True, slots=True)
class MuonMatrix:
    """A 2-D weight that Muon orthogonalizes, as one rank holds it."""

    rows: int
    """Output features on the rank (after tensor-parallel splitting)."""
    cols: int
    """Input features on the rank."""
    count: float
    """How many such matrices the rank holds per layer."""
    expert: bool = False
    """A routed expert's matrix (sharded over expert-dp by ``dist_muon``)."""

    @property
    def params(self) -> float:
        """Parameters of all ``count`` matrices."""
        return self.rows * self.cols * self.count


def is_muon(job: TrainingJob) -> bool:
    """True when the job's optimizer is Muon (`MUON_OPTIMIZERS`)."""
    return job.optimizer in MUON_OPTIMIZERS


def newton_schulz_flops(rows: int, cols: int, steps: int = NS_STEPS) -> float:
    """FLOPs of ``steps`` Newton-Schulz iterations on a ``rows`` x ``cols`` matrix.

    With m = min(rows, cols) and n = max(rows, cols) (``newton_schulz`` transposes a tall
    matrix), one step (``newton_schulz_step``) is ``X·Xᵀ`` (2·m·m·n), ``A·A`` (2·m³) and
    ``B·X`` (2·m·m·n): 4·m²·n + 2·m³ per step. Source: Emerging-Optimizers ``muon_utils.py``.
    """
    if rows < 1 or cols < 1 or steps < 1:
        raise SpecError(
            f"newton_schulz_flops: rows ({rows}), cols ({cols}) and steps ({steps}) must be >= 1"
        )
    m, n = min(rows, cols), max(rows, cols)
    return steps * (4.0 * m * m * n + 2.0 * m**3)


def _attention_matrices(model: ModelSpec, tp: int) -> list[MuonMatrix]:
    """The attention projections on one TP rank: MLA's down projections whole (Megatron-core
    builds them ``duplicated``), its up projections and the output projection split; GQA's
    Q, K and V apart (``--muon-split-qkv``), K/V heads replicated where tp exceeds them."""
    h, a = model.hidden_size, model.num_attention_heads
    if model.uses_mla:
        d_qk, d_rope, d_v = mla_head_dims(model)
        kv_lora = model.kv_lora_rank or 0
        mats = [
            MuonMatrix(rows=kv_lora + d_rope, cols=h, count=1),
            MuonMatrix(rows=a * (d_qk + d_v) // tp, cols=kv_lora, count=1),
            MuonMatrix(rows=h, cols=a * d_v // tp, count=1),
        ]
        if model.q_lora_rank is None:
            return [MuonMatrix(rows=a * (d_qk + d_rope) // tp, cols=h, count=1), *mats]
        q_lora = model.q_lora_rank
        return [
            MuonMatrix(rows=q_lora, cols=h, count=1),
            MuonMatrix(rows=a * (d_qk + d_rope) // tp, cols=q_lora, count=1),
            *mats,
        ]
    d, g = model.head_dim, model.query_groups
    kv_rows = max(g // tp, 1) * d
    return [
        MuonMatrix(rows=a * d // tp, cols=h, count=1),
        MuonMatrix(rows=kv_rows, cols=h, count=2),
        MuonMatrix(rows=h, cols=a * d // tp, count=1),
    ]


def _mlp_matrices(
    model: ModelSpec, ffn: int, split: int, count: float, expert: bool, width: int | None = None
) -> list[MuonMatrix]:
    """fc1 (both SwiGLU halves in one matrix) and fc2 of an MLP of inner size ``ffn`` on
    rows of ``width`` (default hidden_size) split over ``split`` ranks, ``count`` of them."""
    if ffn == 0:
        return []
    up = (2 if model.activation == "swiglu" else 1) * ffn // split
    h = model.hidden_size if width is None else width
    return [
        MuonMatrix(rows=up, cols=h, count=count, expert=expert),
        MuonMatrix(rows=h, cols=ffn // split, count=count, expert=expert),
    ]


def layer_matrices(model: ModelSpec, plan: ParallelPlan, is_moe: bool) -> tuple[MuonMatrix, ...]:
    """The matrices Muon orthogonalizes of one dense or MoE layer on one rank (module
    docstring): attention projections (Q, K, V apart; MLA's down and up projections), the
    MLP or the shared expert split over tp, the router (replicated), a latent MoE layer's
    two projections (replicated) and each local routed expert split over etp
    (``num_experts / ep`` of them, ℓ wide with ``moe_latent_size``)."""
    mats = _attention_matrices(model, plan.tp)
    if not is_moe:
        return (*mats, *_mlp_matrices(model, model.ffn_hidden_size, plan.tp, 1, False))
    local = model.num_experts / plan.ep
    h, latent = model.hidden_size, model.moe_latent_size
    projections = (
        ()
        if latent is None
        else (MuonMatrix(rows=latent, cols=h, count=1), MuonMatrix(rows=h, cols=latent, count=1))
    )
    return (
        *mats,
        *_mlp_matrices(model, model.moe_shared_expert_size, plan.tp, 1, False),
        MuonMatrix(rows=model.num_experts, cols=h, count=1),
        *projections,
        *_mlp_matrices(
            model,
            model.expert_ffn_hidden_size,
            plan.expert_tp,
            local,
            True,
            model.expert_hidden_size,
        ),
    )


def stage_matrices(
    model: ModelSpec, plan: ParallelPlan, layers: tuple[int, ...]
) -> tuple[MuonMatrix, ...]:
    """`layer_matrices` of every layer index in ``layers`` (one rank of a stage)."""
    mask = model.moe_layer_mask()
    by_kind = {kind: layer_matrices(model, plan, kind) for kind in set(mask)}
    return tuple(m for index in layers for m in by_kind[mask[index]])


def mtp_matrices(model: ModelSpec, plan: ParallelPlan, depths: int) -> tuple[MuonMatrix, ...]:
    """The matrices Muon orthogonalizes of the MTP weight sets a rank that runs ``depths``
    depths holds (`specs.params.ParamCounts.mtp_weights`: one per depth, or one for all with
    ``mtp_repeated_layer``): each set's ``eh_proj`` (``MultiTokenPredictionLayer``, a
    column-parallel 2h -> h weight, h/tp x 2h on the rank, not an embedding or output
    parameter) and the `layer_matrices` of its layers (`ModelSpec.mtp_depth_kinds`; Muon
    runs on transformers only). Its norms are 1-D: Adam's."""
    h = model.hidden_size
    one = (MuonMatrix(rows=h // plan.tp, cols=2 * h, count=1),)
    for kind in model.mtp_depth_kinds():
        one += layer_matrices(model, plan, kind.is_moe)
    return tuple(m for _ in count_params(model).mtp_weights(depths) for m in one)


def muon_shards(job: TrainingJob, plan: ParallelPlan) -> tuple[int, int]:
    """(dense, expert) ranks over which ``dist_muon`` deals whole parameters out: (dp·cp,
    expert-dp); (1, 1) for ``muon`` (module docstring) and where dp·cp is 1, in which
    ``LayerWiseDistributedOptimizer.shard_params`` deals nothing, not even the routed
    experts over expert-dp ("simplify when dp_cp group size is 1", d7288711)."""
    if job.optimizer != "dist_muon" or plan.dp * plan.cp == 1:
        return 1, 1
    return plan.dp * plan.cp, max(plan.expert_dp, 1)


def muon_state_bytes(precision: str) -> int:
    """State bytes per Muon parameter: fp32 master (none in an fp32 run) plus the fp32
    momentum (`MUON_STATE_BYTES`)."""
    return (0 if precision == "fp32" else 4) + MUON_STATE_BYTES


def newton_schulz_dtype(precision: str) -> str:
    """Dtype of the Newton-Schulz GEMMs and of their working tensors: bf16, the cast of
    ``newton_schulz`` at ``--muon-fp32-matmul-prec medium``; fp32 in an fp32 run (this
    model's convention: at ``medium`` the code casts an fp32 run's update to bf16 as well).
    The step's time (`muon_step_s`) and its working set (`newton_schulz_working_bytes`) both
    take it."""
    return ops.activation_dtype(precision)


def newton_schulz_working_bytes(rows: int, cols: int, ns_element_bytes: int) -> float:
    """Bytes that orthogonalizing one ``rows`` x ``cols`` update allocates at once beyond the
    resident parameter, main gradient and momentum, with e = rows·cols, m = min(rows, cols)
    and b = ``ns_element_bytes`` (`newton_schulz_dtype`): 4·e + max(12·e, 2·b·(e + m²)).

    Source: Emerging-Optimizers v0.1.0 (d5363b4a) and v0.2.0 (1effa026)
    ``orthogonalized_optimizers/orthogonalized_optimizer.py`` ``OrthogonalizedOptimizer.step``
    and ``muon_utils.py`` ``newton_schulz``, ``newton_schulz_step``; Megatron-LM d7288711
    ``megatron/core/optimizer/muon.py`` ``TensorParallelMuon.scaled_orthogonalize_fn``.
    Parameters are stepped one at a time, so only one matrix's tensors are alive. Held
    throughout: the Nesterov update ``grad.lerp(momentum_buffer)``, a new fp32 tensor (4·e;
    Megatron-Bridge's ``distributed_muon_with_cosine_annealing`` sets
    ``muon_use_nesterov=True``, v0.4.0 ``recipes/utils/optimizer_utils.py``). On top, one
    phase at a time: the Frobenius normalisation ``F.normalize`` (fp32, 4·e); the cast to
    bf16 (4·e + 2·e); each step's ``A = X·Xᵀ``, ``B = addmm(A, A, A)`` and the new
    ``X = addmm(X, B, X)`` while the old ``X`` lives (2·b·e + 2·b·m²); the cast back
    (b·e + 4·e); ``orth_grad * scale_factor * extra_scale_factor``, two fp32 products while
    ``orth_grad`` lives (12·e). The casts never exceed the last phase. ``--muon-tp-mode
    blockwise`` orthogonalizes the rank's shard as it is, so rows and cols are the shard's.
    """
    e, m = rows * cols, min(rows, cols)
    step = 2.0 * ns_element_bytes * (e + m * m)
    return 4.0 * e + max(12.0 * e, step)


def newton_schulz_time_s(
    profile: HardwareProfile, matrix: MuonMatrix, dtype: str, steps: int = NS_STEPS
) -> float:
    """Seconds of the Newton-Schulz GEMMs of one ``matrix`` (`newton_schulz_flops`: per step
    an m x m x n, an m x m x m and an m x n x m GEMM at ``dtype``'s rate)."""
    m, n = min(matrix.rows, matrix.cols), max(matrix.rows, matrix.cols)
    step = (
        ops.gemm_time_s(profile, m, m, n, dtype)
        + ops.gemm_time_s(profile, m, m, m, dtype)
        + ops.gemm_time_s(profile, m, n, m, dtype)
    )
    return steps * step


def muon_step_bytes(main_grad_bytes: int, mixed_precision: bool) -> int:
    """Bytes per Muon parameter of one step outside the Newton-Schulz GEMMs:
    `MUON_STEP_BYTES`, the gradient-norm read of the fp32 main gradient (4;
    ``LayerWiseDistributedOptimizer.get_grad_norm`` over each optimizer's main gradients)
    and, for a 16-bit gradient buffer under mixed precision, its copy into fp32
    (``main_param.grad = model_param.main_grad.float()``: read 2, write 4)."""
    copy = 6 if mixed_precision and main_grad_bytes == 2 else 0
    return MUON_STEP_BYTES + 4 + copy


def muon_step_s(
    profile: HardwareProfile,
    job: TrainingJob,
    matrices: tuple[MuonMatrix, ...],
    main_grad_bytes: int = 4,
) -> float:
    """Muon's part of one rank's optimizer step over the ``matrices`` it steps
    (`costmodel.muon_sharding.worst_rank_share`): the memory-bound passes
    (`muon_step_bytes` per parameter, `MUON_KERNELS_PER_MATRIX` kernels per matrix) and the
    Newton-Schulz GEMMs (bf16 at ``--muon-fp32-matmul-prec medium``; fp32 in an fp32 run).
    The Adam part and the buffer zeroing are
    `costmodel.optimizer_passes.optimizer_step_time_s`'s."""
    dtype = newton_schulz_dtype(job.precision)
    params = kernels = gemm_s = 0.0
    shape_s: dict[tuple[int, int], float] = {}  # a share repeats a few shapes many times
    for matrix in matrices:
        params += matrix.params
        kernels += matrix.count
        shape = (matrix.rows, matrix.cols)
        if shape not in shape_s:
            shape_s[shape] = newton_schulz_time_s(profile, matrix, dtype)
        gemm_s += matrix.count * shape_s[shape]
    bytes_moved = muon_step_bytes(main_grad_bytes, job.precision != "fp32") * params
    num_ops = round(MUON_KERNELS_PER_MATRIX * kernels)
    return ops.memory_bound_time_s(profile, bytes_moved, num_ops=num_ops) + gemm_s


def uneven_gather_bytes(total_bytes: float, smallest_fraction: float, ranks: int) -> float:
    """nccl-tests all-gather size (bytes) that moves as much per rank as gathering
    ``total_bytes`` dealt unevenly over ``ranks`` ranks, the smallest share holding
    ``smallest_fraction`` of them: total·(1 - smallest_fraction)·ranks/(ranks - 1).

    PyTorch's ``ProcessGroupNCCL::allgather`` (``torch/csrc/distributed/c10d/
    ProcessGroupNCCL.cpp``) runs output tensors of unequal sizes as one coalesced group of
    broadcasts, one per source rank, so every rank receives every other rank's share unpadded;
    the rank with the smallest share receives the most, total - smallest. An all-gather of
    nccl-tests size S receives S·(ranks - 1)/ranks per rank, hence the size above; an even
    deal (smallest_fraction = 1/ranks) gives ``total_bytes``. 0 for fewer than 2 ranks."""
    if ranks < 2:
        return 0.0
    return total_bytes * (1.0 - smallest_fraction) * ranks / (ranks - 1)


def layerwise_gather_buffer_bytes(
    job: TrainingJob,
    plan: ParallelPlan,
    dense_params: float,
    expert_params: float,
    weight_bytes: float,
) -> float:
    """Bytes of ``dist_muon``'s all-gather buffers after the step: ``_allgather_helper``
    flattens the rank's own parameters and allocates a receive buffer of every other rank's
    flattened share, a whole 16-bit copy of the group's parameters, first over dp·cp
    (``dense_params``) and then, after those are freed, over expert-dp (``expert_params``);
    ``weight_bytes`` per parameter (the model weights' dtype). Source: Megatron-LM d7288711
    ``megatron/core/optimizer/layer_wise_optimizer.py``
    ``LayerWiseDistributedOptimizer.allgather_params``; ``shard_params`` deals nothing over a
    group of one rank. 0 for ``adam`` and ``muon`` and with ``overlap_param_gather``, where the
    gathers run per DDP bucket in the forward (``async_allgather``)."""
    if job.optimizer != "dist_muon" or plan.overlap_param_gather:
        return 0.0
    dense_shards, expert_shards = muon_shards(job, plan)
    dense = dense_params if dense_shards > 1 else 0.0
    expert = expert_params if expert_shards > 1 else 0.0
    return weight_bytes * max(dense, expert)


def layerwise_gather_s(
    profile: HardwareProfile,
    job: TrainingJob,
    chunk_params: tuple[tuple[float, float], ...],
    gather_bytes: tuple[tuple[float, float], ...],
    groups: tuple[GroupPlacement, GroupPlacement],
    smallest_shares: tuple[float, float],
) -> float:
    """``dist_muon``'s all-gather of the updated parameters after the step
    (``LayerWiseDistributedOptimizer.allgather_params``: one ``all_gather`` of every rank's
    flattened parameters over dp·cp, one over expert-dp, each rank's share at its own size),
    with ``chunk_params`` the (dense, expert) parameters of each chunk of the rank,
    ``gather_bytes`` their bytes per parameter, ``groups`` the (dp·cp, expert-dp) placements
    and ``smallest_shares`` the fractions of the stage's dense and expert parameters dealt to
    the rank with the fewest (`costmodel.muon_sharding.smallest_share_fractions`), priced as
    `uneven_gather_bytes`; 0 for ``adam`` and ``muon``."""
    if job.optimizer != "dist_muon":
        return 0.0
    dense = sum(d * b for (d, _), (b, _) in zip(chunk_params, gather_bytes, strict=True))
    expert = sum(e * b for (_, e), (_, b) in zip(chunk_params, gather_bytes, strict=True))
    return sum(
        collective_time_s(
            profile, "all_gather", uneven_gather_bytes(size, smallest, group.size), group
        )
        for size, smallest, group in zip((dense, expert), smallest_shares, groups, strict=True)
    )
