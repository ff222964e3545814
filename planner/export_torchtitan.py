"""Export of a `PlanBundle` to torchtitan: its job config (`torchtitan_config`) and that
config as a TOML file (`torchtitan_toml`); the Megatron-LM export and the choice of target
are `planner.export`.

torchtitan (keys of `torchtitan/config/job_config.py` and its integration-test
`base_config.toml`): `[parallelism]` data_parallel_replicate_degree,
data_parallel_shard_degree, tensor_parallel_degree, pipeline_parallel_degree,
pipeline_parallel_schedule, pipeline_parallel_layers_per_stage,
pipeline_parallel_microbatch_size, context_parallel_degree, expert_parallel_degree,
expert_tensor_parallel_degree; `[training]` local_batch_size, global_batch_size, seq_len;
`[activation_checkpoint]` mode, selective_ac_option. torchtitan has no DDP-with-sharded-
optimizer mode: the distributed optimizer maps onto FSDP (data_parallel_shard_degree = dp),
and the TOML header and `paraplan export` state that difference
(`torchtitan_sharding_note`); plain data parallelism maps onto DDP
(data_parallel_replicate_degree = dp); TP in torchtitan
always shards norms along the sequence (Megatron's sequence parallelism). Execution
options: FP8 keys of ``[quantize.linear.float8]``, the rest refused
(`torchtitan_option_config`, by the field groups of `planner.export_options`). The MoE
router is part of the flavor, not of the TOML: torchtitan's deepseek_v3 671B flavor routes
as the deepseek-v3 preset (sigmoid, route_norm, route_scale 2.5, 8 expert groups of which
4, expert bias); for a new flavor the header lists the router it needs
(`torchtitan_router_note`). torchtitan has no Mamba-2 layer and no latent MoE projections:
a hybrid model (`TORCHTITAN_HYBRID_RULE`) and a latent MoE model
(`TORCHTITAN_LATENT_MOE_RULE`) are refused.
"""

from __future__ import annotations

from typing import Any

from costmodel.execution import ExecutionOptions
from planner.export_fields import FP8_FIELDS, PRICING_FIELDS
from planner.export_options import bundle_options, changed_fields, refusal, refused
from planner.export_split import largest_chunk_layers, torchtitan_split
from specs.bundle import PlanBundle
from specs.errors import SpecError
from specs.job import TrainingJob
from specs.kv_sharding import executor_kv_refusal
from specs.model import ModelSpec
from specs.plan import ParallelPlan

_TORCHTITAN_FLAVORS = {
    "llama3-8b": ("llama3", "8B"),
    "llama3-70b": ("llama3", "70B"),
    "llama3.1-405b": ("llama3", "405B"),
    "deepseek-v3": ("deepseek_v3", "671B"),
    "qwen3-30b-a3b": ("qwen3", "30B-A3B"),
    "qwen3-235b-a22b": ("qwen3", "235B-A22B"),
    "gpt-oss-20b": ("gpt_oss", "20b"),
    "gpt-oss-120b": ("gpt_oss", "120b"),
}
"""Presets with a torchtitan model of the same architecture and size: (model name, flavor)
of torchtitan's model registry (``torchtitan/models/<name>/__init__.py``: llama3 8B/70B/
405B, deepseek_v3 671B, qwen3 30B-A3B/235B-A22B, gpt_oss 20b/120b)."""


TORCHTITAN_PACKED_RULE = "torchtitan_packed_sequences"
"""Rule id of the torchtitan export's refusal of packed sequences (`torchtitan_config`)."""

TORCHTITAN_HYBRID_RULE = "torchtitan_hybrid"
"""Rule id of the torchtitan export's refusal of a hybrid model (`torchtitan_model`)."""

TORCHTITAN_GATE_RULE = "torchtitan_output_gate"
"""Rule id of the torchtitan export's refusal of an output gate (`torchtitan_model`)."""

TORCHTITAN_DSA_RULE = "torchtitan_dsa"
"""Rule id of the torchtitan export's refusal of DeepSeek sparse attention (`torchtitan_model`)."""

TORCHTITAN_LATENT_MOE_RULE = "torchtitan_latent_moe"
"""Rule id of the torchtitan export's refusal of a latent MoE model (`torchtitan_model`)."""


def torchtitan_model(model: ModelSpec) -> tuple[str, str, bool]:
    """(torchtitan model name, flavor, known) for ``model``.

    A preset of `_TORCHTITAN_FLAVORS` maps to its flavor (known). Otherwise the torchtitan
    family of the same architecture is named with the preset's name as flavor (not known:
    the user adds that flavor): multi-latent attention is deepseek_v3, attention sinks
    gpt_oss; a pre-norm SwiGLU/RMSNorm/RoPE decoder without biases or sliding windows is
    qwen3 with per-head q/k RMSNorm (``qk_norm=True`` in every flavor of torchtitan's
    ``qwen3_configs``, dense 0.6B-32B and MoE 30B-A3B/235B-A22B) and llama3 without it,
    dense only (llama3's attention has no q/k norm and its block no experts).
    Raises `SpecError` for an architecture torchtitan has no model of (e.g. a Mixtral-style
    MoE without qk-norm, GELU or biased layers), for a hybrid model (`TORCHTITAN_HYBRID_RULE`)
    for a latent MoE model (`TORCHTITAN_LATENT_MOE_RULE`) and for gated attention or a gated
    shared expert (`TORCHTITAN_GATE_RULE`) and for DeepSeek sparse attention
    (`TORCHTITAN_DSA_RULE`).
    """
    if model.is_hybrid:
        raise SpecError(
            f"[{TORCHTITAN_HYBRID_RULE}] {model.name!r} is a hybrid model (hybrid_layer_pattern "
            f"{model.hybrid_layer_pattern!r}): torchtitan's registry (llama3, deepseek_v3, "
            "qwen3, gpt_oss) has no Mamba-2 or gated DeltaNet layer: export --to megatron "
            "(pretrain_hybrid.py)"
        )
    if model.attention_output_gate or model.moe_shared_expert_gate:
        raise SpecError(
            f"[{TORCHTITAN_GATE_RULE}] {model.name!r} sets attention_output_gate "
            f"({model.attention_output_gate}) or moe_shared_expert_gate "
            f"({model.moe_shared_expert_gate}): torchtitan's attention and MoE (llama3, "
            "deepseek_v3, qwen3, gpt_oss) have no sigmoid output gate: export --to megatron"
        )
    if model.uses_dsa:
        raise SpecError(
            f"[{TORCHTITAN_DSA_RULE}] {model.name!r} uses DeepSeek sparse attention "
            f"(dsa_indexer_topk {model.dsa_indexer_topk}): torchtitan's deepseek_v3 model runs "
            "dense multi-latent attention, no lightning indexer or top-k: export --to megatron "
            "(--experimental-attention-variant dsa)"
        )
    if model.moe_latent_size is not None:
        raise SpecError(
            f"[{TORCHTITAN_LATENT_MOE_RULE}] {model.name!r} is a latent MoE model "
            f"(moe_latent_size {model.moe_latent_size}): torchtitan's MoE (deepseek_v3, qwen3, "
            "gpt_oss) has no h -> latent -> h expert projections: export --to megatron "
            "(--moe-latent-size)"
        )
    if model.name in _TORCHTITAN_FLAVORS:
        return (*_TORCHTITAN_FLAVORS[model.name], True)
    if model.kv_lora_rank is not None:
        return "deepseek_v3", model.name, False
    if model.attention_sinks:
        return "gpt_oss", model.name, False
    llama_like = (
        model.activation == "swiglu"
        and model.normalization == "rmsnorm"
        and model.position_embedding == "rope"
        and not model.add_bias_linear
        and not model.add_qkv_bias
        and model.sliding_window is None
    )
    if llama_like and model.qk_layernorm:
        return "qwen3", model.name, False
    if llama_like and not model.is_moe:
        return "llama3", model.name, False
    raise SpecError(
        f"[torchtitan_model] torchtitan has no model with the architecture of "
        f"{model.name!r} (activation {model.activation}, num_experts {model.num_experts}, "
        f"add_bias_linear {model.add_bias_linear}); its registry holds llama3, deepseek_v3, "
        "qwen3 and gpt_oss: export --to megatron, or add the model to torchtitan"
    )


def torchtitan_router_note(model: ModelSpec) -> str | None:
    """The router settings a new torchtitan flavor of ``model`` needs, or None for a dense
    model. torchtitan's TOML names a flavor and cannot set the router; its router
    (``TokenChoiceTopKRouter`` of torchtitan/models/moe/moe.py, ``MoEArgs``) takes
    score_func (softmax over all experts, or sigmoid), route_norm (renormalize the top-k
    scores), route_scale, num_expert_groups / num_limited_groups and load_balance_coeff
    (the expert-bias update rate; None turns the bias off). Megatron's softmax over the
    top-k logits is torchtitan's softmax with route_norm; its sigmoid always renormalizes.
    `SpecError` for the score functions and balancing torchtitan's router has no form of."""
    if not model.is_moe:
        return None
    r = model.router
    if r.moe_router_score_function == "sqrtsoftplus" or r.moe_router_load_balancing_type in (
        "sinkhorn",
    ):
        raise SpecError(
            f"[torchtitan_router] torchtitan's router has no form of "
            f"moe_router_score_function {r.moe_router_score_function!r} with "
            f"moe_router_load_balancing_type {r.moe_router_load_balancing_type!r} (its "
            "score_func is softmax or sigmoid, its balancing the expert bias): export --to "
            "megatron"
        )
    norm = r.moe_router_score_function == "sigmoid" or not r.moe_router_pre_softmax
    bias = r.moe_router_bias_update_rate if r.moe_router_enable_expert_bias else None
    return (
        f"router of the flavor (MoEArgs): score_func={r.moe_router_score_function!r}, "
        f"route_norm={norm}, route_scale={r.moe_router_topk_scaling_factor or 1.0}, "
        f"num_expert_groups={r.moe_router_num_groups}, "
        f"num_limited_groups={r.moe_router_group_topk}, load_balance_coeff={bias}; the "
        f"auxiliary loss ({r.moe_router_load_balancing_type}, coefficient "
        f"{r.moe_aux_loss_coeff:g}) is the trainer's to add"
    )


def _activation_checkpoint(model: ModelSpec, plan: ParallelPlan) -> dict[str, Any]:
    """`[activation_checkpoint]`: torchtitan's selective mode is per-op ("op") or every
    n-th layer (an integer); partial full recompute (block) maps onto the latter."""
    if plan.recompute == "none":
        return {"mode": "none"}
    if plan.recompute == "selective":
        return {"mode": "selective", "selective_ac_option": "op"}
    chunk = largest_chunk_layers(model, plan)
    if plan.recompute_method == "block" and (plan.recompute_num_layers or chunk) < chunk:
        every = max(1, round(chunk / (plan.recompute_num_layers or chunk)))
        return {"mode": "selective", "selective_ac_option": str(every)}
    return {"mode": "full"}


TORCHTITAN_MUON_REFUSAL = (
    "the plan was priced with Megatron-core's Muon (Newton-Schulz on each tensor-parallel "
    "shard, layer-wise sharding over dp*cp, `costmodel.optimizer_muon`); torchtitan's "
    "optimizers are Adam and AdamW, plus, where present, the experimental Muon of "
    "torchtitan/experiments/dion_optimizer, another implementation: export --to megatron, or "
    "re-plan with --optimizer adam"
)
"""Why `torchtitan_config` refuses a job whose optimizer is Muon."""

TORCHTITAN_NVFP4_RULE = "torchtitan_has_no_nvfp4"
"""Rule id of `torchtitan_config`'s refusal of nvfp4 jobs."""

TORCHTITAN_NVFP4_REFUSAL = (
    "torchtitan trains low-precision linears through torchao's float8 and MX converters "
    "(quantize.linear.float8, quantize.linear.mx with MXLinearConfig recipes); neither runs "
    "Transformer Engine's NVFP4 recipe (E2M1 with 16-element E4M3 scales, Random Hadamard "
    "Transform on the wgrad operands, stochastic rounding of gradients) that the estimate "
    "priced: export --to megatron, or re-plan with --precision fp8"
)
"""Why `torchtitan_config` refuses an nvfp4 job (torchtitan
``torchtitan/components/quantization/mx.py``: MXFP8 recipes through torchao's
``MXLinearConfig.from_recipe_name``; torchao lists NVFP4 training as a prototype without the
Hadamard transform and stochastic rounding, ``torchao/prototype/mx_formats/README.md``)."""


TORCHTITAN_LORA_RULE = "torchtitan_has_no_lora"
"""Rule id of `torchtitan_config`'s refusal of LoRA jobs."""

TORCHTITAN_LORA_REFUSAL = (
    "the estimate priced Megatron-Bridge's LoRA adapters on a frozen Megatron-core model; "
    "the torchtitan job config this export writes trains every weight and has no adapter "
    "settings: run the plan with Megatron-Bridge's peft config (the megatron export names "
    "it), or re-plan without --lora-rank"
)
"""Why `torchtitan_config` refuses a LoRA job."""


PRICED_SHARDING = {
    "no_shard": "nothing sharded over dp (DDP)",
    "optim": "the optimizer state sharded over dp, weights and gradients replicated "
    "(distributed optimizer, ZeRO-1)",
    "optim_grads": "the optimizer state and gradients sharded over dp, weights replicated",
    "optim_grads_params": "weights, gradients and optimizer state sharded over dp",
}
"""What each data-parallel sharding of a priced plan shards (Megatron-FSDP's strategy
names, `ParallelPlan.data_parallel_sharding_strategy`; ``optim`` also for
``--use-distributed-optimizer``)."""


def priced_sharding(plan: ParallelPlan) -> str:
    """The data-parallel sharding the plan was priced with, a key of `PRICED_SHARDING`."""
    if plan.use_megatron_fsdp:
        return plan.data_parallel_sharding_strategy
    return "optim" if plan.distributed_optimizer else "no_shard"


def exports_fsdp(plan: ParallelPlan) -> bool:
    """True when the export sets data_parallel_shard_degree = dp: a sharded optimizer,
    Megatron-FSDP or expert parallelism (torchtitan carves EP out of the FSDP mesh)."""
    return plan.distributed_optimizer or plan.use_megatron_fsdp or plan.ep > 1


def torchtitan_sharding_note(plan: ParallelPlan) -> str | None:
    """The difference between the data-parallel sharding the plan was priced with and the
    one torchtitan runs, or None when they agree. torchtitan's data_parallel_shard_degree
    is FSDP2's ``fully_shard`` (`torchtitan/distributed/parallel_dims.py`, dp_shard): it
    shards weights, gradients and optimizer state alike, with a weight all-gather per layer
    in forward and backward; it has no mode that shards only the optimizer state."""
    sharding = priced_sharding(plan)
    if not exports_fsdp(plan) or plan.dp == 1 or sharding == "optim_grads_params":
        return None
    return (
        f"data_parallel_shard_degree = {plan.dp} runs FSDP (weights, gradients and "
        f"optimizer state sharded, weights all-gathered per layer), but the plan was priced "
        f"with {PRICED_SHARDING[sharding]}: torchtitan's memory and communication differ "
        "from the prediction; for the priced plan export --to megatron, or re-plan with "
        "--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params and export "
        "that plan"
    )


def torchtitan_option_config(
    options: ExecutionOptions, job: TrainingJob, fsdp: bool
) -> dict[str, dict[str, Any]]:
    """torchtitan job-config sections of ``options`` (``fsdp``: the export shards with
    FSDP); `SpecError` listing every priced option torchtitan cannot take."""
    allowed = set(PRICING_FIELDS) | {"runtime", "fp8_recipe", "fp8_param", "fp8_attention"}
    lines = [
        refusal(n, getattr(options, n), "torchtitan's job config has no such setting: re-plan "
                "without it, or export --to megatron")
        for n in changed_fields(options)
        if n not in allowed
    ]  # fmt: skip
    if options.fp8_attention:
        why = (
            "torchtitan's job config quantizes linear layers, not attention (no FP8 attention "
            "setting): re-plan with --no-fp8-attention"
        )
        lines.append(refusal("fp8_attention", True, why))
    fp8 = [n for n in FP8_FIELDS if n in changed_fields(options)]
    if fp8 and job.precision != "fp8":
        why = f"FP8 settings need an fp8 job, the job is {job.precision}: re-plan with fp8"
        lines += [refusal(n, getattr(options, n), why) for n in fp8]
    if options.fp8_recipe == "mxfp8":
        why = "torchtitan runs MXFP8 through its own MX converter: re-plan with tensorwise"
        lines.append(refusal("fp8_recipe", "mxfp8", why))
    if options.fp8_param and not fsdp:
        why = "torchtitan gathers FP8 weights only under FSDP: re-plan with --dist-opt"
        lines.append(refusal("fp8_param", True, why))
    if lines:
        raise refused("torchtitan", lines)
    float8: dict[str, Any] = {}
    if options.fp8_recipe == "tensorwise":
        float8["recipe_name"] = "tensorwise"
    if options.fp8_param:
        float8["enable_fsdp_float8_all_gather"] = True
        float8["precompute_float8_dynamic_scale_for_fsdp"] = True
    return {"quantize.linear.float8": float8} if float8 else {}


def torchtitan_config(bundle: PlanBundle) -> dict[str, dict[str, Any]]:
    """The torchtitan job config of ``bundle``, section -> key -> value; `SpecError` for a
    Muon job (`TORCHTITAN_MUON_REFUSAL`), an nvfp4 job (`TORCHTITAN_NVFP4_REFUSAL`), a
    LoRA job (`TORCHTITAN_LORA_REFUSAL`), a job of packed sequences (`TORCHTITAN_PACKED_RULE`),
    a tp above the key/value heads
    (`specs.kv_sharding.executor_kv_refusal`) and a hybrid model (`torchtitan_model`)."""
    model, job, plan = bundle.model, bundle.job, bundle.plan
    if job.lora is not None:
        raise SpecError(f"[{TORCHTITAN_LORA_RULE}] {job.lora.label()}: {TORCHTITAN_LORA_REFUSAL}")
    if job.optimizer != "adam":
        raise SpecError(f"optimizer ({job.optimizer}): {TORCHTITAN_MUON_REFUSAL}")
    if job.precision == "nvfp4":
        raise SpecError(f"[{TORCHTITAN_NVFP4_RULE}] precision (nvfp4): {TORCHTITAN_NVFP4_REFUSAL}")
    if job.packed_document_tokens is not None:
        raise SpecError(
            f"[{TORCHTITAN_PACKED_RULE}] packed sequences (packed_document_tokens "
            f"{job.packed_document_tokens}): the plan was priced with Transformer Engine's THD "
            "attention per document, which a torchtitan job does not run; export --target "
            "megatron, or plan without --packed-doc-len"
        )
    kv = executor_kv_refusal(model, plan.tp, "torchtitan")
    if kv is not None:
        raise SpecError(kv)
    name, flavor, _ = torchtitan_model(model)
    sharded = exports_fsdp(plan)
    parallelism: dict[str, Any] = {
        "data_parallel_replicate_degree": 1 if sharded else plan.dp,
        "data_parallel_shard_degree": plan.dp if sharded else 1,
        "tensor_parallel_degree": plan.tp,
        "pipeline_parallel_degree": plan.pp,
        "context_parallel_degree": plan.cp,
        "expert_parallel_degree": plan.ep,
        "expert_tensor_parallel_degree": plan.expert_tp if model.is_moe else 1,
    }
    training: dict[str, Any] = {"global_batch_size": job.global_batch_size}
    if plan.pp > 1:
        parallelism["pipeline_parallel_schedule"] = "Interleaved1F1B" if plan.vpp > 1 else "1F1B"
        parallelism.update(torchtitan_split(model, plan)[0])
        parallelism["pipeline_parallel_microbatch_size"] = plan.micro_batch_size
        training["local_batch_size"] = job.global_batch_size // plan.dp
    else:
        # Without a pipeline torchtitan accumulates gradients over global / (local·dp) steps.
        training["local_batch_size"] = plan.micro_batch_size
    training["seq_len"] = job.seq_length
    training["mixed_precision_param"] = "float32" if job.precision == "fp32" else "bfloat16"
    config: dict[str, dict[str, Any]] = {
        "model": {"name": name, "flavor": flavor},
        "training": training,
        "parallelism": parallelism,
        "activation_checkpoint": _activation_checkpoint(model, plan),
    }
    if job.precision == "fp8":
        config["model"]["converters"] = ["quantize.linear.float8"]
    return config | torchtitan_option_config(bundle_options(bundle), job, fsdp=sharded)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise SpecError(f"cannot write {value!r} ({type(value).__name__}) as a TOML value")


def torchtitan_toml(bundle: PlanBundle) -> str:
    """`torchtitan_config` as TOML text, with a header naming the plan."""
    lines = [
        f"# torchtitan: {bundle.model.name} on {bundle.cluster.num_gpus} x "
        f"{bundle.cluster.hardware}, plan {bundle.plan.label()}",
    ]
    if bundle.plan.pp > 1:
        lines += [f"# {note}" for note in torchtitan_split(bundle.model, bundle.plan)[1]]
    note = torchtitan_sharding_note(bundle.plan)
    if note is not None:
        lines.append(f"# {note}")
    name, flavor, known = torchtitan_model(bundle.model)
    if not known:
        lines.append(
            f"# torchtitan's {name} has no flavor {flavor!r}: add one with this model's sizes"
        )
        router = torchtitan_router_note(bundle.model)
        if router is not None:
            lines.append(f"# {router}")
    for section, values in torchtitan_config(bundle).items():
        lines.append(f"\n[{section}]")
        lines += [f"{key} = {_toml_value(value)}" for key, value in values.items()]
    return "\n".join(lines) + "\n"
