"""Megatron-LM export of a gated DeltaNet model through the GPT path: ``pretrain_gpt.py``
with an experimental attention variant, the way Megatron-Bridge trains Qwen3-Next.

Megatron-LM d98e8a64 (the mirror's HEAD):
- ``gpt_builders.py`` `gpt_builder`: with ``--experimental-attention-variant`` and no
  ``--spec`` the decoder is
  `get_transformer_block_with_experimental_attention_variant_spec`
  (``megatron/core/models/gpt/experimental_attention_variant_module_specs.py``). Each
  transformer layer holds one token mixer and one MLP: the mixer is a `GatedDeltaNet`
  (`get_gated_delta_net_module_spec`) where the linear-attention pattern holds 1 and the
  standard self-attention otherwise (`_get_self_attention_module_spec`, which builds the
  q/k norms of ``--qk-layernorm`` and the gate of ``--attention-output-gate``); the MLP is
  an MoE block where the ``--moe-layer-freq`` pattern holds 1 (`get_moe_layer_pattern`).
- ``--experimental-attention-variant gdn`` (`TransformerConfig.experimental_attention_variant`,
  a Literal of ``gdn``, ``gdn2``, ``dsa`` and ``gated_delta_net``, the last a deprecated
  alias of ``gdn`` that Megatron-Bridge v0.6.0's ``qwen3_next_bridge.py`` still sets);
  ``__post_init__`` asserts ``linear_attention_freq`` and the ``linear_*`` sizes are set,
  Hv a multiple of Hk and both divisible by tp·cp.
- ``--linear-attention-freq`` (`get_linear_attention_pattern`, ``la_freq_type`` in
  ``arguments.py``): an integer N puts standard attention on layer i iff (i + 1) % N == 0,
  else a Python list expression of 1 (gated DeltaNet) and 0 (attention) per layer.
- Multi-token prediction: the MTP layer is built from the last decoder layer's spec
  (`gpt_builder`, ``decoder_layer_specs[-1]``), so each MTP depth is one layer of that
  kind.
- The pipeline split counts transformer layers, each two symbols of the hybrid pattern;
  an even split is the plain flags, any other a ``--pipeline-model-parallel-layout``.

A pattern the GPT path cannot build (Mamba-2 ``M`` layers, a mixer not followed by its MLP,
an MTP depth other than the last layer, a pipeline boundary inside a layer) keeps the
hybrid path (`planner.export_hybrid`, `gpt_path_problem` says why).
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.export_hybrid import gdn_arguments
from specs.errors import SpecError
from specs.gdn_checks import has_gdn
from specs.model import ModelSpec
from specs.pipeline_layout import compress_layout
from specs.pipeline_split import ChunkSplit, pipeline_split
from specs.plan import ParallelPlan

GPT_PATH_RULE = "gdn_gpt_path_expressible"
"""Rule id of `gdn_gpt_arguments`' refusal of a model or plan the GPT path cannot build."""
GDN_ATTENTION_VARIANT = "gdn"
"""The canonical ``--experimental-attention-variant`` of a gated DeltaNet
(``GDN_ATTENTION_VARIANTS`` in ``experimental_attention_variant_module_specs.py``)."""
GPT_MIXERS = {"G": 1, "*": 0}
"""Hybrid mixer symbols the GPT path builds, with their linear-attention pattern value."""
GPT_MLPS = {"E": 1, "-": 0}
"""Hybrid MLP symbols the GPT path builds, with their ``--moe-layer-freq`` pattern value."""
SYMBOLS_PER_LAYER = 2
"""Hybrid symbols of one GPT transformer layer: a mixer and an MLP."""


@dataclass(frozen=True, kw_only=True, slots=True)
class GptLayers:
    """A hybrid pattern read as GPT transformer layers (`gpt_layers`)."""

    linear_attention: tuple[int, ...]
    """Per layer, 1 for a gated DeltaNet, 0 for standard attention."""
    moe: tuple[int, ...]
    """Per layer, 1 for an MoE MLP, 0 for a dense one."""


def gpt_layers(pattern: str) -> GptLayers | None:
    """``pattern`` as (mixer, MLP) pairs, or None when some symbol pair is not a mixer of
    `GPT_MIXERS` followed by an MLP of `GPT_MLPS`."""
    if len(pattern) % SYMBOLS_PER_LAYER:
        return None
    pairs = [pattern[i : i + SYMBOLS_PER_LAYER] for i in range(0, len(pattern), 2)]
    if any(p[0] not in GPT_MIXERS or p[1] not in GPT_MLPS for p in pairs):
        return None
    return GptLayers(
        linear_attention=tuple(GPT_MIXERS[p[0]] for p in pairs),
        moe=tuple(GPT_MLPS[p[1]] for p in pairs),
    )


def gpt_path_problem(model: ModelSpec, plan: ParallelPlan) -> str | None:
    """Why the GPT path cannot build ``model`` under ``plan`` (module docstring); None when
    it can. A model without gated DeltaNet layers has no GPT-path export of this kind."""
    pattern = model.hybrid_layer_pattern or ""
    if not has_gdn(model):
        return "the model has no gated DeltaNet layer"
    if gpt_layers(pattern) is None:
        return (
            "its pattern is not a sequence of one mixer (G or *) and one MLP (E or -) "
            "per transformer layer"
        )
    if model.mtp_num_layers and model.mtp_hybrid_pattern != pattern[-SYMBOLS_PER_LAYER:]:
        return (
            f"its MTP depth {model.mtp_hybrid_pattern!r} is not one layer like its last, "
            f"{pattern[-SYMBOLS_PER_LAYER:]!r}"
        )
    if plan.pp > 1 and any(
        c.layers.start % SYMBOLS_PER_LAYER or c.layers.stop % SYMBOLS_PER_LAYER
        for c in pipeline_split(model, plan).in_forward_order()
    ):
        return "the plan's pipeline split cuts a transformer layer between its two symbols"
    return None


def uses_gpt_path(model: ModelSpec, plan: ParallelPlan) -> bool:
    """True when ``model`` is exported through ``pretrain_gpt.py`` with the gated DeltaNet
    attention variant (`gpt_path_problem` finds nothing)."""
    return gpt_path_problem(model, plan) is None


def gpt_num_layers(model: ModelSpec) -> int:
    """``--num-layers`` on the GPT path: the pattern's transformer layers."""
    return len(model.hybrid_layer_pattern or "") // SYMBOLS_PER_LAYER


def pattern_expression(values: tuple[int, ...]) -> str:
    """A Python list expression Megatron evaluates into ``values``: the shortest repeated
    run ``([1]*3+[0]*1)*12``, else the runs in order."""
    for period in range(1, len(values) + 1):
        if len(values) % period == 0 and values == values[:period] * (len(values) // period):
            break
    runs: list[tuple[int, int]] = []
    for v in values[:period]:
        if runs and runs[-1][0] == v:
            runs[-1] = (v, runs[-1][1] + 1)
        else:
            runs.append((v, 1))
    body = "+".join(f"[{v}]*{n}" for v, n in runs)
    repeats = len(values) // period
    return f"({body})*{repeats}" if repeats > 1 else f"({body})"


def linear_attention_freq_argument(layers: GptLayers) -> str:
    """``--linear-attention-freq``: N when standard attention sits exactly on the layers
    with (i + 1) % N == 0, else a list expression (`pattern_expression`)."""
    values = layers.linear_attention
    for n in range(2, len(values) + 1):
        if values == tuple(0 if (i + 1) % n == 0 else 1 for i in range(len(values))):
            return str(n)
    return pattern_expression(values)


def moe_layer_freq_argument(layers: GptLayers) -> str:
    """``--moe-layer-freq``: N when layer i is MoE iff i % N == 0 (`get_moe_layer_pattern`),
    else a list expression."""
    values = layers.moe
    for n in range(1, len(values) + 1):
        if values == tuple(1 if i % n == 0 else 0 for i in range(len(values))):
            return str(n)
    return pattern_expression(values)


def gpt_split_arguments(model: ModelSpec, plan: ParallelPlan) -> list[str]:
    """The split flags on the GPT path: none for pp 1; the virtual stage size when every
    virtual stage holds the same transformer layers and only the last the MTP depths;
    otherwise the layout of the split (`gpt_layout`)."""
    if plan.pp == 1:
        return []
    chunks = pipeline_split(model, plan).in_forward_order()
    sizes = {c.num_layers for c in chunks}
    mtp_last = all(c.mtp_layers == 0 for c in chunks[:-1])
    if len(sizes) == 1 and mtp_last:
        if plan.vpp == 1:
            return []
        per_stage = sizes.pop() // SYMBOLS_PER_LAYER
        return ["--num-layers-per-virtual-pipeline-stage", str(per_stage)]
    return ["--pipeline-model-parallel-layout", gpt_layout(chunks)]


def gpt_layout(chunks: tuple[ChunkSplit, ...]) -> str:
    """The ``--pipeline-model-parallel-layout`` of ``chunks`` (forward order) in transformer
    layers: ``E`` opens the first stage, each stage its layers as ``t``, its MTP depths as
    ``m``, and ``L`` closes the last."""
    stages = []
    for c in chunks:
        text = "E" if c.embedding else ""
        text += "t" * (c.num_layers // SYMBOLS_PER_LAYER) + "m" * c.mtp_layers
        stages.append(text + ("L" if c.loss else ""))
    return compress_layout(tuple(stages))


def gdn_gpt_arguments(model: ModelSpec, plan: ParallelPlan) -> list[str]:
    """The GPT-path flags of a gated DeltaNet model: the attention variant, the
    linear-attention and MoE patterns, the ``linear_*`` sizes and the split (module
    docstring); `SpecError` naming `gpt_path_problem`'s reason for a model or plan the GPT
    path cannot build."""
    problem = gpt_path_problem(model, plan)
    layers = gpt_layers(model.hybrid_layer_pattern or "")
    if problem is not None or layers is None:
        raise SpecError(
            f"[{GPT_PATH_RULE}] {model.name!r} under plan {plan.label()}: the GPT path "
            f"cannot build it: {problem}; export it through pretrain_hybrid.py"
        )
    args = [
        "--experimental-attention-variant", GDN_ATTENTION_VARIANT,
        "--linear-attention-freq", linear_attention_freq_argument(layers),
        *gdn_arguments(model),
    ]  # fmt: skip
    if model.is_moe:
        args += ["--moe-layer-freq", moe_layer_freq_argument(layers)]
    return args + gpt_split_arguments(model, plan)
