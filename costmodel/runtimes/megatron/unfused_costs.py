"""Memory-bound work Megatron-core runs as chains of separate PyTorch kernels where a fused
kernel would make one pass: rotary embeddings it cannot hand to Transformer Engine's fused
kernel, and the routed experts' FC2 bias.

Both are counted in passes over one full tensor (one pass = every element read or written
once, e bytes each), from the kernels the Python code launches and the kernels autograd
runs for their backward; small operands ([s, d] frequencies, [h] biases, [rows, 1] router
probabilities) are left out of the bytes but their kernels are counted.

- RoPE (`rope_time_s`). Transformer Engine's ``fused_apply_rotary_pos_emb`` reads and
  writes each query and key element once per pass. Megatron-core falls back to
  ``_apply_rotary_pos_emb_bshd`` whenever the YaRN attention factor ``mscale`` is not 1
  ("mscale=... is not supported by TE's fused RoPE. Using unfused implementation",
  ``apply_rotary_pos_emb`` in megatron/core/models/common/embeddings/rope_utils.py, in
  every Megatron-core that Megatron-Bridge v0.2.0-v0.5.0 pin); with no ``yarn_mscale`` the
  factor is 0.1·ln(scaling factor) + 1 (``_yarn_get_concentration_factor`` in
  ``yarn_rotary_pos_embedding.py``), 1.35 for GPT-OSS's factor 32. Forward of
  ``t' = cat(t·cos + rotate_half(t)·sin, t_pass)`` over q and k: ``t·cos`` (2 passes),
  the negated half (1) and the concatenation (2) of ``_rotate_half``, ``·sin`` (2), the add
  (3) and the final ``cat`` with the empty pass-through part (2): 12 passes in 6 kernels,
  plus 6 small kernels for cos, sin, the mscale products and casts. Backward: ``grad·sin``
  (2), the negated half (1), the concatenation of the two half gradients (2), ``grad·cos``
  (2), the sum of the two gradient paths of t (3) and the ``zeros`` + copy of the backward
  of the ``t[..., :rot_dim]`` slice (3): 13 passes in 7 kernels.
- Expert FC2 bias (`expert_fc2_bias_time_s`). ``TEGroupedMLP`` builds FC2 with
  ``skip_bias_add=True`` and adds the bias weighted by each row's router probability in
  ``_apply_bias`` (megatron/core/transformer/moe/experts.py, in the same Megatron-cores):
  per local expert ``t + b * p`` over its rows, then ``torch.cat`` of the results. Forward:
  ``b * p`` (1 pass, written), the add (3), the concatenation (2): 6 passes, 2 kernels
  per expert plus one. Backward: the bias gradient ``(grad · p)`` summed over rows (3)
  and the probability gradient ``(grad · b)`` summed over h (3) per expert, and the
  concatenation of the per-expert output gradients (2, the backward of ``torch.split``):
  8 passes, 4 kernels per expert plus one. FC1's bias rides in the grouped GEMM (forward
  epilogue; its gradient in the weight-gradient GEMM, Transformer Engine
  ``_GroupedLinear.backward``) and costs nothing extra. Transformer Engine's fused
  grouped MLP (``use_transformer_engine_op_fuser``,
  `ExecutionOptions.moe_fused_grouped_mlp`) replaces the whole path.
"""

from __future__ import annotations

from costmodel import compute as ops
from costmodel.compute import Direction
from profiles.schema import HardwareProfile

UNFUSED_ROPE_PASSES: dict[str, int] = {"forward": 12, "backward": 13}
"""Full-tensor passes of Megatron-core's unfused RoPE over q and k (module docstring)."""

UNFUSED_ROPE_KERNELS: dict[str, int] = {"forward": 12, "backward": 7}
"""Kernel launches of the unfused RoPE per tensor (module docstring)."""

EXPERT_BIAS_PASSES: dict[str, int] = {"forward": 6, "backward": 8}
"""Full-tensor passes of ``TEGroupedMLP._apply_bias`` over the FC2 output."""

EXPERT_BIAS_KERNELS_PER_EXPERT: dict[str, int] = {"forward": 2, "backward": 4}
"""Kernel launches of ``_apply_bias`` per local expert (plus one concatenation)."""


def rope_time_s(
    profile: HardwareProfile,
    tokens: float,
    qk_width: float,
    elem: int,
    direction: Direction,
    *,
    fused: bool,
) -> float:
    """Rotary embedding over ``tokens`` rows of the query and key (``qk_width`` = q + kv
    per rank, ``elem`` bytes each), in seconds: Transformer Engine's fused kernel
    (`costmodel.compute.rope_time_s`, one read and one write) when ``fused``, else
    Megatron-core's unfused chain (`UNFUSED_ROPE_PASSES` over the query and the key, each
    its own chain of `UNFUSED_ROPE_KERNELS`; module docstring)."""
    if fused:
        return ops.rope_time_s(profile, tokens, int(qk_width), elem, direction)
    moved = UNFUSED_ROPE_PASSES[direction] * elem * tokens * qk_width
    return ops.memory_bound_time_s(profile, moved, num_ops=2 * UNFUSED_ROPE_KERNELS[direction])


def expert_fc2_bias_time_s(
    profile: HardwareProfile,
    rows: float,
    hidden: int,
    elem: int,
    local_experts: int,
    direction: Direction,
) -> float:
    """Seconds of ``TEGroupedMLP._apply_bias`` on one rank for one microbatch: the
    probability-weighted FC2 bias added to ``rows`` expert output rows of ``hidden``
    elements of ``elem`` bytes, expert by expert (`EXPERT_BIAS_PASSES`,
    `EXPERT_BIAS_KERNELS_PER_EXPERT`; module docstring)."""
    moved = EXPERT_BIAS_PASSES[direction] * elem * rows * hidden
    kernels = EXPERT_BIAS_KERNELS_PER_EXPERT[direction] * local_experts + 1
    return ops.memory_bound_time_s(profile, moved, num_ops=kernels)
