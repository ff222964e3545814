"""The shard of one layer's activations a rank holds (`ActivationShard`, `activation_shard`):
its tokens, TP and SP degrees, element bytes and the bytes of each saved GEMM input under
the run's precision, FP8 recipe, dropout and LoRA adapters; the per-tensor conventions
(FP8 inputs, the output projection's copy, LoRA's saved inputs) are in
`costmodel.layer_activations`, which adds up each layer kind's tensors from it."""

from __future__ import annotations

from dataclasses import dataclass

from costmodel.compute import MASK_BYTES, NVFP4_BYTES
from costmodel.fp8_attention import core_saved_bytes
from specs.finetune import LoraSpec, has_adapter, layer_targets
from specs.job import TrainingJob
from specs.layer_kinds import LayerKind
from specs.plan import ParallelPlan


def activation_element_bytes(job: TrainingJob) -> int:
    """Bytes of one stored activation: 2 for bf16, fp8 and nvfp4 runs (low-precision GEMMs
    still keep bf16 layer outputs), 4 for fp32 runs."""
    return 4 if job.precision == "fp32" else 2


@dataclass(frozen=True, kw_only=True, slots=True)
class ActivationShard:
    """The activation shape one rank sees for one microbatch."""

    tokens: float
    """b·s/cp: tokens of the microbatch on this CP rank."""
    seq_length: int
    """Full sequence s (keys each query attends to)."""
    tp: int
    """Divisor of TP-sharded activations."""
    cp: int = 1
    """Context-parallel degree (the Mamba-2 mixer's head split under CP,
    `costmodel.mamba_activations`)."""
    sp: int
    """Divisor of activations outside TP regions: tp with sequence parallelism, else 1."""
    element_bytes: int
    """Bytes per stored activation element."""
    gemm_input_bytes: float
    """Bytes per element of a saved linear-layer input (the quantized copy the wgrad GEMM
    reads): 1 under FP8, `costmodel.compute.NVFP4_BYTES` (0.5625) under NVFP4, else
    element_bytes."""
    mask_bytes: int
    """Bytes per element of a hidden-dropout mask: 1 with dropout, 0 without."""
    proj_saves_input: bool = False
    """The attention output projection saves its original (bf16) input, the tensor the
    attention kernel keeps, instead of an FP8 copy (`projection_saves_original_input`)."""
    expert_fc1_saves_input: bool = False
    """The routed experts' FC1 saves its 16-bit input rows instead of their quantized copy
    (`costmodel.saved_inputs.expert_fc1_saves_input`)."""
    core_qkv_bytes: float
    """Bytes per element of the Q, K and V the fused attention core saves: element_bytes,
    or the FP8 form of FP8 attention (`costmodel.fp8_attention.core_saved_bytes`)."""
    core_output_bytes: float
    """Bytes per element of the attention output the core saves (as `core_qkv_bytes`)."""
    lora: LoraSpec | None = None
    """The job's LoRA adapters (the base frozen), or None (module docstring)."""

    @property
    def fp8_copy_bytes(self) -> float:
        """Bytes of the separate FP8 (or NVFP4) copy of a tensor another kernel keeps in
        bf16."""
        return self.gemm_input_bytes if self.gemm_input_bytes < self.element_bytes else 0

    @property
    def proj_copy_bytes(self) -> float:
        """Bytes per element the output projection keeps beside the attention output (none
        when it is frozen: no wgrad GEMM reads it)."""
        return 0 if self.proj_saves_input or self.lora is not None else self.fp8_copy_bytes


def projection_saves_original_input(fp8_recipe: str) -> bool:
    """True when, in an fp8 run with Transformer Engine's ``fp8_recipe``, Megatron-core's
    attention output projection saves its original input rather than the FP8-cast copy.

    Megatron-core calls ``set_save_original_input(self.linear_proj)`` when ``config.fp8``,
    ``fp8_recipe != 'delayed'`` and Transformer Engine is at least 2.6
    (``megatron/core/transformer/attention.py``, ``Attention.__init__``, from core_v0.14.0;
    ``megatron/core/extensions/transformer_engine.py`` ``set_save_original_input``): "the
    output of the fused core_attn is saved by itself, and linear_proj also saves the
    quantized tensor of this output". TE's ``Linear`` with ``save_original_input`` saves
    ``inp`` and quantizes it again in the backward (TE v2.6+,
    ``transformer_engine/pytorch/module/linear.py``; not supported with delayed scaling).
    Current scaling (``tensorwise``) and ``mxfp8`` therefore keep no FP8 copy of the
    attention output; ``delayed`` keeps it. NVFP4 runs (``config.fp4``, TE >= 2.7) take
    the same call whatever the FP8 recipe: `activation_shard` sets it for nvfp4 jobs.
    """
    return fp8_recipe != "delayed"


SAVED_GEMM_INPUT_BYTES: dict[str, float] = {"fp8": 1, "nvfp4": NVFP4_BYTES}
"""Bytes per element of a linear layer's saved input by job precision, where it is the
quantized column-wise copy the wgrad GEMM reads rather than the bf16 tensor: one FP8 byte,
or one NVFP4 copy (`costmodel.compute.NVFP4_BYTES`, E2M1 data and its E4M3 block scales)."""


def activation_shard(
    job: TrainingJob,
    plan: ParallelPlan,
    dropout: bool = True,
    proj_saves_input: bool = False,
    fp8_attention_recipe: str | None = None,
    expert_fc1_saves_input: bool = False,
) -> ActivationShard:
    """The shard of one microbatch on one rank; ``fp8_attention_recipe``: the FP8 recipe
    when the run's attention runs in FP8 (`costmodel.fp8_attention.core_saved_bytes`), else
    None; ``expert_fc1_saves_input``: `ActivationShard.expert_fc1_saves_input`."""
    element = activation_element_bytes(job)
    core_qkv, core_output = core_saved_bytes(job.precision, fp8_attention_recipe, element)
    return ActivationShard(
        core_qkv_bytes=core_qkv,
        core_output_bytes=core_output,
        gemm_input_bytes=SAVED_GEMM_INPUT_BYTES.get(job.precision, element),
        mask_bytes=MASK_BYTES if dropout else 0,
        tokens=plan.micro_batch_size * job.seq_length / plan.cp,
        seq_length=job.seq_length,
        tp=plan.tp,
        cp=plan.cp,
        sp=plan.tp if plan.sequence_parallel else 1,
        element_bytes=element,
        proj_saves_input=proj_saves_input or job.precision == "nvfp4",
        expert_fc1_saves_input=expert_fc1_saves_input,
        lora=job.lora,
    )


def lora_column_input_bytes(x: ActivationShard, width: int, target: str) -> float:
    """Bytes kept of the input of the column-parallel ``LayerNormLinear`` ``target``
    (``linear_qkv`` or ``linear_fc1``, ``width`` = h wide): its saved GEMM input in full
    training; under LoRA none when the layer has no adapter, else the base's quantized copy
    (T/tp tokens with SP) and the adapter's 16-bit input (all T tokens), once when they
    are the same tensor (module docstring)."""
    base = x.gemm_input_bytes * x.tokens * width / x.sp
    if x.lora is None:
        return base
    if not has_adapter(x.lora, target):
        return 0.0
    adapter = x.element_bytes * x.tokens * width
    shared = x.sp == 1 and x.gemm_input_bytes == x.element_bytes
    return adapter if shared else adapter + base


def lora_adapter_tensors(x: ActivationShard, kind: LayerKind) -> dict[str, float]:
    """The tensor each adapter of a layer of ``kind`` saves for B, A's output of T x rank
    elements (gathered over tp for a column-parallel base, all-reduced for a row-parallel
    one), by ``{target}_adapter`` name (``linear_`` dropped), for the targets the layer
    holds (`specs.finetune.layer_targets`); empty without LoRA."""
    if x.lora is None:
        return {}
    rank_bytes = x.element_bytes * x.tokens * x.lora.rank
    targets = layer_targets(x.lora, kind)
    return {f"{t.removeprefix('linear_')}_adapter": rank_bytes for t in targets}


def lora_row_input_bytes(x: ActivationShard, target: str) -> float:
    """Bytes per element kept of the input of the row-parallel base ``target`` under LoRA:
    the 16-bit tensor the adapter's A saves when the layer has an adapter there, none for
    an untargeted frozen base (no wgrad GEMM reads it)."""
    return x.element_bytes if has_adapter(x.lora, target) else 0
