"""What per-module selective recompute and CPU activation offloading take off the device.

A layer's saved activations are named tensors (`costmodel.layer_activations.LayerActivations
.tensors`); each Megatron-core module that can be recomputed or offloaded owns some of
them. Recompute modules (``TransformerConfig.recompute_modules``,
`megatron/core/transformer/transformer_config.py`, applied in `transformer_layer.py`,
`moe/experts.py`, `moe/moe_layer.py` and `multi_latent_attention.py`):

- ``core_attn``: the attention core's own saved tensors (checkpointed core attention).
- ``layernorm``: the outputs of the two pre-norms, i.e. the QKV and FC1 GEMM inputs, in
  a MoE layer the 16-bit pre-MLP norm output the router keeps (output-discarding
  checkpoint: the norm reruns before the GEMM's backward; the discarded storage is every
  holder's).
- ``mla_up_proj``: the up-projected Q, K, V heads of MLA (output-discarding checkpoint of
  the up projections and RoPE).
- ``mlp``: the dense MLP block behind its norm input, with the FC1 and FC2 LoRA adapters'
  saved tensors (normal checkpoint: the block's input is the residual stream, kept anyway,
  as the Transformer Engine spec fuses the dense pre-MLP norm into ``linear_fc1``).
  Dense layers only: ``TransformerLayer.__init__`` sets ``recompute_mlp`` under ``if not
  self.is_moe_layer`` (`transformer_layer.py`, HEAD d98e8a64 and the core pins of
  Megatron-Bridge v0.2.0 to v0.6.0), and no MoE module reads ``mlp``; a MoE layer's
  tensors carry names of their own, so ``mlp`` frees nothing there.
- ``moe``: the MoE layer behind its input (``MoELayer.forward``, `moe/moe_layer.py`:
  ``tensor_parallel.checkpoint`` or ``te_checkpoint`` of ``custom_forward`` over
  ``hidden_states``). That input is the 16-bit pre-MLP norm output, which the checkpoint
  keeps: ``router_input`` stays (``layernorm`` frees it), the shared expert's quantized
  copy of it goes.
- ``moe_act``: the routed experts' activation output (output-discarding checkpoint).
- ``shared_experts``: the shared expert's inner activations, its quantized FC1 input and,
  with its gate, the gate's saved tensors (normal checkpoint of `SharedExpertMLP.forward`,
  whose input is the norm output the router keeps).
- ``gdn_norm_out``: a gated DeltaNet's output norm (`_GDNBase.__init__`
  ``recompute_norm_out``; ``gdn.py`` `GatedDeltaNet.forward` wraps `_gated_norm_and_a2a`
  in a ``CheckpointWithoutOutput`` and discards its output once ``out_proj`` has it): the
  norm's fp32 rstd and the ``out_proj`` input; its inputs, the rule output and z, stay
  saved as the checkpoint's inputs.

Offload modules (``TransformerConfig.offload_modules``, fine-grained activation
offloading, `megatron/core/pipeline_parallel/fine_grained_activation_offload.py`) move the
input of the module to host memory: ``attn_norm`` the layer input, ``qkv_linear`` the
QKV GEMM input, ``core_attn`` Q, K and V, ``attn_proj`` the attention output,
``mlp_norm`` the MLP-block input, ``expert_fc1`` the dispatched expert rows, ``moe_act``
the experts' FC1 output. Layer-level offloading (``cpu_offloading_num_layers``, Transformer
Engine's ``get_cpu_offload_context``) moves every saved tensor of the offloaded layers.
A tensor that is recomputed is not offloaded.
"""

from __future__ import annotations

from collections.abc import Iterable

RECOMPUTE_TENSORS: dict[str, tuple[str, ...]] = {
    "core_attn": ("core_attention",),
    "layernorm": ("qkv_input", "fc1_input", "router_input"),
    "mla_up_proj": ("qkv_heads",),
    "mlp": ("fc1_input", "fc1_output", "act_output", "fc1_adapter", "fc2_adapter"),
    "moe": (
        "shared_fc1_input",
        "router",
        "shared_fc1_output",
        "shared_act_output",
        "shared_gate",
        "latent_fc1_input",
        "latent_fc2_input",
        "expert_input",
        "expert_fc1_output",
        "expert_act_output",
        "expert_row_probs",
    ),
    "moe_act": ("expert_act_output",),
    "shared_experts": ("shared_fc1_input", "shared_fc1_output", "shared_act_output", "shared_gate"),
    "gdn_norm_out": ("gdn_norm_rstd", "gdn_out_proj_input"),
}
"""Recompute module -> the saved tensors it frees (module docstring)."""

OFFLOAD_TENSORS: dict[str, tuple[str, ...]] = {
    "attn_norm": ("attn_norm_input",),
    "qkv_linear": ("qkv_input",),
    "core_attn": ("qkv_heads",),
    "attn_proj": ("attn_output",),
    "mlp_norm": ("mlp_norm_input",),
    "expert_fc1": ("expert_input",),
    "moe_act": ("expert_fc1_output",),
}
"""Offload module -> the saved tensors it moves to host memory (module docstring)."""


def _names(table: dict[str, tuple[str, ...]], modules: Iterable[str]) -> set[str]:
    return {name for module in modules for name in table[module]}


def recomputed_bytes(tensors: tuple[tuple[str, float], ...], modules: Iterable[str]) -> float:
    """Bytes of one layer's saved tensors that recomputing ``modules`` frees."""
    names = _names(RECOMPUTE_TENSORS, modules)
    return sum(value for name, value in tensors if name in names)


def offloaded_bytes(
    tensors: tuple[tuple[str, float], ...],
    offload_modules: Iterable[str],
    recompute_modules: Iterable[str] = (),
) -> float:
    """Bytes of one layer's saved tensors that offloading ``offload_modules`` moves to host
    memory, less those ``recompute_modules`` already free."""
    names = _names(OFFLOAD_TENSORS, offload_modules) - _names(RECOMPUTE_TENSORS, recompute_modules)
    return sum(value for name, value in tensors if name in names)
