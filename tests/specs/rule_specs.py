"""The base specs of the `specs.rules` case table (`tests.specs.rule_cases`): a
Llama-3-8B-shaped model, a Mixtral-8x7B-shaped one, Nemotron-H- and Qwen3-Next-shaped
hybrids and a GLM-5-shaped DeepSeek-sparse-attention model on 64 H100s, `Change` (field
changes applied to them) and `Case` (a rule with a plan it rejects, a plan it accepts and
the operands its message must name)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from specs.cluster import ClusterSpec
from specs.finetune import LoraSpec
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.plan import ParallelPlan

# Llama-3-8B shapes (32 layers, h 4096, 32 heads, 8 KV groups, F 14336).
LLAMA = ModelSpec(
    name="llama3-8b-like",
    num_layers=32,
    hidden_size=4096,
    num_attention_heads=32,
    num_query_groups=8,
    ffn_hidden_size=14336,
    vocab_size=128256,
    max_position_embeddings=8192,
)


# Mixtral-8x7B shapes: the same attention, 8 experts of F 14336, top-2.
MIXTRAL = LLAMA.replace(name="mixtral-like", vocab_size=32000, num_experts=8, moe_top_k=2)


# Nemotron-H-8B shapes on 32 layers: Mamba-2 (128 heads of 64, 8 groups), MLP and attention.
HYBRID = LLAMA.replace(
    name="nemotron-h-like",
    hybrid_layer_pattern="M-M*" * 8,
    ffn_hidden_size=21504,
    activation="gelu",
    position_embedding="none",
)


# Qwen3-Next-shaped hybrid on 32 layers: gated DeltaNets (16 key / 32 value heads of 128),
# MLPs and attention.
GDN_HYBRID = LLAMA.replace(name="qwen3-next-like", hybrid_layer_pattern="G-G*" * 8)


# GLM-5-shaped DeepSeek sparse attention on 32 layers: MLA (q latent 1024, kv latent 512) and
# an indexer of 8 heads of 128 choosing 2048 keys.
DSA_MODEL = LLAMA.replace(
    name="glm5-like",
    num_query_groups=None,
    q_lora_rank=1024,
    kv_lora_rank=512,
    qk_head_dim=128,
    qk_pos_emb_head_dim=64,
    v_head_dim=128,
    dsa_indexer_n_heads=8,
    dsa_indexer_head_dim=128,
    dsa_indexer_topk=2048,
)


CLUSTER = ClusterSpec(hardware="h100-sxm-80gb", num_gpus=64)


JOB = TrainingJob(seq_length=4096, global_batch_size=256)


# tp2 pp4 vpp2 dp8 on 64 GPUs: m = 256 / (1·8) = 32 microbatches, a multiple of pp.
PLAN = ParallelPlan(
    tp=2,
    pp=4,
    vpp=2,
    dp=8,
    schedule="interleaved",
    sequence_parallel=True,
    tp_comm_overlap=True,
    distributed_optimizer=True,
    overlap_grad_reduce=True,
    overlap_param_gather=True,
)


# 32 layers in pp4·vpp2 = 8 virtual stages: E + 4 layers, six stages of 4, 4 layers + L.
LAYOUT_8 = "Et*4|(t*4|)*6t*4L"


# LoRA: rank 16 on every target; multi-latent attention fields; a Megatron-FSDP plan.
LORA = LoraSpec(rank=16)


MLA_FIELDS: dict[str, Any] = {
    "kv_lora_rank": 512,
    "qk_head_dim": 128,
    "qk_pos_emb_head_dim": 64,
    "v_head_dim": 128,
    "num_query_groups": None,
}


FSDP_PLAN: dict[str, Any] = {
    "use_megatron_fsdp": True,
    "distributed_optimizer": False,
    "data_parallel_sharding_strategy": "optim_grads_params",
}


Specs = tuple[ModelSpec, ClusterSpec, TrainingJob, ParallelPlan]


@dataclass(frozen=True)
class Change:
    """Field changes applied to the base specs (the base model is LLAMA unless given)."""

    model: dict[str, Any] = field(default_factory=dict)
    cluster: dict[str, Any] = field(default_factory=dict)
    job: dict[str, Any] = field(default_factory=dict)
    plan: dict[str, Any] = field(default_factory=dict)
    base: ModelSpec = LLAMA

    def specs(self) -> Specs:
        return (
            self.base.replace(**self.model),
            dataclasses.replace(CLUSTER, **self.cluster),
            dataclasses.replace(JOB, **self.job),
            PLAN.replace(**self.plan),
        )


@dataclass(frozen=True)
class Case:
    rule: str
    reject: Change
    accept: Change
    operands: tuple[str, ...]
    """Substrings the rejection message must contain: each operand with its value."""
