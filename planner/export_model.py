"""Megatron-LM arguments of the model a plan trains: shape, attention variants (GQA, MLA,
DeepSeek sparse attention, sliding windows and sinks), MTP, MoE and router. `planner.export`
puts them first in the command it builds.

Megatron-LM (flag spellings and validation rules: megatron-facts.md §8, snapshot
d98e8a64 of NVIDIA/Megatron-LM):
- GQA needs both `--group-query-attention` and `--num-query-groups` (the latter alone is
  ignored, §1.3).
- `--max-position-embeddings` must be >= `--seq-length`; rope has no table, so the exported
  value is max(model value, seq length).
- Sliding-window layers and attention sinks: `--window-size`, `--window-attn-skip-freq`,
  `--softmax-type learnable` (`window_arguments`), so the run attends as the estimate priced.
- The MoE router (`ModelSpec.router`): every field that differs from Megatron-core's
  default becomes the flag of the same name (`router_arguments`), so the run trains the
  model's router (DeepSeek-V3's sigmoid, expert bias, group-limited routing and scaling;
  Qwen3's and Mixtral's aux loss) rather than Megatron's default one.
- Leading dense layers (DeepSeek's `first_k_dense_replace`) become a `--moe-layer-freq`
  pattern such as ``([0]*3+[1]*58)``, which Megatron evaluates into a 0/1 list per layer.
"""

from __future__ import annotations

import dataclasses

from costmodel.execution import ExecutionOptions
from specs.model import ModelSpec
from specs.plan import ParallelPlan
from specs.router import RouterSpec


def moe_layer_freq_argument(model: ModelSpec) -> str:
    """`--moe-layer-freq` for the model's MoE layer mask: an integer k when layer i is MoE
    iff i % k == 0, else a Python list expression that Megatron evaluates, compact
    (``([0]*3+[1]*58)``) when the MoE layers follow a dense prefix."""
    mask = [int(v) for v in model.moe_layer_mask()]
    first = model.moe_first_dense_layers
    if first == 0:
        return str(model.moe_layer_freq)
    if model.moe_layer_freq == 1:
        return f"([0]*{first}+[1]*{model.num_layers - first})"
    return "[" + ",".join(str(v) for v in mask) + "]"


def model_arguments(model: ModelSpec, seq_length: int, num_layers: int) -> list[str]:
    """Shape flags: layers (``num_layers``: the GPT path counts a hybrid pattern's layers,
    `planner.export_gdn_gpt`), widths, attention, MLP, norm, positions, embeddings."""
    args = [
        "--num-layers", str(num_layers),
        "--hidden-size", str(model.hidden_size),
        "--num-attention-heads", str(model.num_attention_heads),
        "--ffn-hidden-size", str(model.ffn_hidden_size),
        "--seq-length", str(seq_length),
        "--max-position-embeddings", str(max(model.max_position_embeddings, seq_length)),
        "--tokenizer-type", "NullTokenizer",
        "--vocab-size", str(model.vocab_size),
    ]  # fmt: skip
    if model.kv_channels is not None:
        args += ["--kv-channels", str(model.kv_channels)]
    if model.num_query_groups is not None and model.query_groups != model.num_attention_heads:
        args += ["--group-query-attention", "--num-query-groups", str(model.query_groups)]
    if model.uses_mla:
        args += _mla_arguments(model)
    if model.uses_dsa:
        args += dsa_arguments(model)
    if model.activation == "swiglu":
        args.append("--swiglu")
    if model.normalization == "rmsnorm":
        args += ["--normalization", "RMSNorm"]
    if model.layernorm_zero_centered_gamma:  # TransformerConfig.layernorm_zero_centered_gamma
        args.append("--apply-layernorm-1p")
    if model.position_embedding == "rope":
        args += ["--position-embedding-type", "rope", "--rotary-base", str(model.rotary_base)]
    elif model.position_embedding == "none":
        args += ["--position-embedding-type", "none"]
    if not model.tied_embeddings:
        args.append("--untie-embeddings-and-output-weights")
    if not model.add_bias_linear:
        args.append("--disable-bias-linear")
    if model.add_qkv_bias:
        args.append("--add-qkv-bias")
    if model.qk_layernorm:
        args.append("--qk-layernorm")
    if model.attention_output_gate:  # TransformerConfig.attention_output_gate
        args.append("--attention-output-gate")
    if model.rotary_percent != 1.0 and model.position_embedding == "rope":
        args += ["--rotary-percent", f"{model.rotary_percent:g}"]
    if model.mtp_num_layers:
        args += ["--mtp-num-layers", str(model.mtp_num_layers)]
    if model.mtp_repeated_layer:  # TransformerConfig.mtp_use_repeated_layer
        args.append("--mtp-use-repeated-layer")
    return args + window_arguments(model)


def window_arguments(model: ModelSpec) -> list[str]:
    """Sliding-window attention and attention sinks: `--window-size W-1,0` (Megatron's
    window counts the keys left of the query, Hugging Face's `sliding_window` includes the
    query), `--window-attn-skip-freq N` (layer n, 1-based, is windowed iff n % N != 0,
    `is_layer_window_attention` in megatron/core/transformer/utils.py, the same layers as
    `ModelSpec.sliding_window_every`), `--softmax-type learnable` for per-head sink logits
    (Megatron-LM examples/gptoss/02_train.sh; Megatron-Bridge gpt_oss_bridge.py)."""
    args = []
    if model.sliding_window is not None:
        args += [
            "--window-size", f"{model.sliding_window - 1},0",
            "--window-attn-skip-freq", str(model.sliding_window_every),
        ]  # fmt: skip
    if model.attention_sinks:
        args += ["--softmax-type", "learnable"]
    return args


def dsa_arguments(model: ModelSpec) -> list[str]:
    """DeepSeek sparse attention flags (Megatron-LM `TransformerConfig` fields through
    ``ArgumentGroupFactory``, as in ``tests/functional_tests/test_cases/gpt/
    gpt3_mcore_te_tp2_pp2_dsa/model_config.yaml``): the variant, the indexer's sizes, index
    sharing and the indexer loss where set, the cuDNN kernel backend the cost model prices
    (`costmodel.runtimes.megatron.dsa_costs`) and ``--no-rope-fusion``, which
    `TransformerConfig.__post_init__` requires of DSA ("RoPE fusion is not supported for
    DSAttention")."""
    args = [
        "--experimental-attention-variant", "dsa",
        "--dsa-indexer-n-heads", str(model.dsa_indexer_n_heads),
        "--dsa-indexer-head-dim", str(model.dsa_indexer_head_dim),
        "--dsa-indexer-topk", str(model.dsa_indexer_topk),
    ]  # fmt: skip
    if model.dsa_indexer_topk_freq != 1:
        args += ["--dsa-indexer-topk-freq", str(model.dsa_indexer_topk_freq)]
    if model.dsa_indexer_skip_topk_offset:
        args += ["--dsa-indexer-skip-topk-offset", str(model.dsa_indexer_skip_topk_offset)]
    if model.dsa_indexer_loss_coeff:
        args += ["--dsa-indexer-loss-coeff", f"{model.dsa_indexer_loss_coeff:g}"]
    if model.dsa_indexer_use_sparse_loss:
        args.append("--dsa-indexer-use-sparse-loss")
    return [*args, "--dsa-kernel-backend", "cudnn", "--no-rope-fusion"]


def _mla_arguments(model: ModelSpec) -> list[str]:
    """Multi-latent attention flags (Megatron `MLATransformerConfig` fields)."""
    args = ["--multi-latent-attention"]
    if model.q_lora_rank is not None:
        args += ["--q-lora-rank", str(model.q_lora_rank)]
    args += [
        "--kv-lora-rank", str(model.kv_lora_rank),
        "--qk-head-dim", str(model.qk_head_dim),
        "--qk-pos-emb-head-dim", str(model.qk_pos_emb_head_dim),
        "--v-head-dim", str(model.v_head_dim),
    ]  # fmt: skip
    return args


def moe_arguments(model: ModelSpec, plan: ParallelPlan, options: ExecutionOptions) -> list[str]:
    """Expert flags, with the priced token dispatcher; empty for dense models."""
    if not model.is_moe:
        return []
    args = [
        "--num-experts", str(model.num_experts),
        "--moe-router-topk", str(model.moe_top_k),
        "--moe-ffn-hidden-size", str(model.expert_ffn_hidden_size),
    ]  # fmt: skip
    if not model.is_hybrid:  # a hybrid pattern's E symbols place the MoE layers
        args += ["--moe-layer-freq", moe_layer_freq_argument(model)]
    args += [
        "--moe-token-dispatcher-type", options.moe_dispatcher,
        "--moe-grouped-gemm",
        "--expert-model-parallel-size", str(plan.ep),
        "--expert-tensor-parallel-size", str(plan.expert_tp),
    ]  # fmt: skip
    if model.moe_shared_expert_size:
        args += ["--moe-shared-expert-intermediate-size", str(model.moe_shared_expert_size)]
    if model.moe_shared_expert_gate:  # TransformerConfig.moe_shared_expert_gate
        args.append("--moe-shared-expert-gate")
    if model.moe_capacity_factor is not None:
        args += ["--moe-expert-capacity-factor", f"{model.moe_capacity_factor:g}"]
    if model.moe_latent_size is not None:  # TransformerConfig.moe_latent_size
        args += ["--moe-latent-size", str(model.moe_latent_size)]
    return args + router_arguments(model.router)


def router_arguments(router: RouterSpec) -> list[str]:
    """Megatron-LM flags of the router fields that differ from Megatron-core's defaults.

    Each `RouterSpec` field is a `TransformerConfig` field, whose flag Megatron-LM derives
    by replacing underscores with dashes (`ArgumentGroupFactory._format_arg_name`,
    megatron/training/argument_utils.py; `--moe-router-load-balancing-type` and
    `--moe-aux-loss-coeff` are declared by hand in arguments.py `_add_moe_args` with the
    same spellings). A true boolean is the bare flag (``store_true``); numbers use ``%g``.
    """
    args: list[str] = []
    for f in dataclasses.fields(router):
        value = getattr(router, f.name)
        if value == f.default:
            continue
        flag = "--" + f.name.replace("_", "-")
        if isinstance(value, bool):
            args.append(flag)
        elif isinstance(value, float):
            args += [flag, f"{value:g}"]
        else:
            args += [flag, str(value)]
    return args
