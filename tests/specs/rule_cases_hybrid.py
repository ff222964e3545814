"""The `specs.rules` cases of hybrid models and DeepSeek sparse attention
(`specs.rules_hybrid`; the refusals of `specs.rules_optimizer` and `specs.rules_lora`),
part of `tests.specs.rule_cases.CASES`."""

from __future__ import annotations

from typing import Any

from specs.finetune import LoraSpec
from tests.specs.rule_specs import DSA_MODEL, GDN_HYBRID, HYBRID, Case, Change

# Hybrid models (specs.rules_hybrid; the refusals of specs.rules_optimizer, rules_lora):
# MambaMixer's tp asserts, MambaContextParallel's cp asserts and what a hybrid model is not
# priced with.
MUON_PLAN: dict[str, Any] = {
    "distributed_optimizer": False,
    "overlap_grad_reduce": False,
    "overlap_param_gather": False,
}


HYBRID_CASES = [
    Case(
        "mamba_heads_and_groups_divisible_by_tp",
        # 2 groups (128 heads) over tp 4: Megatron's MambaMixer asserts G % tp == 0
        Change(base=HYBRID, model={"mamba_num_groups": 2}, plan={"tp": 4, "dp": 4}),
        Change(base=HYBRID, model={"mamba_num_groups": 2}),
        ("Mamba-2 heads (128", "mamba_num_groups (2)", "tp (4)", "0.50 groups", "{1, 2}"),
    ),
    Case(
        "mamba_heads_divisible_by_tp_cp",
        # 24 heads (8 groups) at tp 2: 12 heads per tp rank do not split over cp 8
        # (MambaContextParallel asserts nheads_local_tp % cp_size == 0)
        Change(base=HYBRID, model={"mamba_num_heads": 24}, plan={"cp": 8, "dp": 1}),
        Change(base=HYBRID, model={"mamba_num_heads": 24}, plan={"cp": 4, "dp": 2}),
        ("24 / tp (2) = 12", "cp (8)", "1.50 heads", "{1, 2, 4}"),
    ),
    Case(
        "mamba_groups_fit_cp",
        # 6 groups (96 heads) at tp 2: 3 groups per tp rank, neither a multiple nor a
        # divisor of cp 2 (MambaContextParallel's ngroups asserts)
        Change(
            base=HYBRID,
            model={"mamba_num_heads": 96, "mamba_num_groups": 6},
            plan={"cp": 2, "dp": 4},
        ),
        Change(
            base=HYBRID,
            model={"mamba_num_heads": 96, "mamba_num_groups": 6},
            plan={"cp": 1, "dp": 8},
        ),
        ("mamba_num_groups (6) / tp (2) = 3", "divisible by cp (2)", "{1}"),
    ),
    Case(
        "gdn_heads_divisible_by_tp_cp",
        # 4 key heads (8 value heads) at tp 2 over cp 4: Megatron's TransformerConfig
        # asserts both head counts divisible by tp·cp
        Change(
            base=GDN_HYBRID,
            model={"linear_num_key_heads": 4, "linear_num_value_heads": 8},
            plan={"cp": 4, "dp": 2},
        ),
        Change(
            base=GDN_HYBRID,
            model={"linear_num_key_heads": 4, "linear_num_value_heads": 8},
            plan={"cp": 2, "dp": 4},
        ),
        ("linear_num_key_heads (4)", "linear_num_value_heads (8)", "tp·cp (2·4 = 8)", "0.50"),
    ),
    Case(
        "dsa_context_parallel_all_gather",
        # Megatron's TransformerConfig: DSAttention context parallelism is allgather only
        Change(base=DSA_MODEL, plan={"cp": 2, "dp": 4}),
        Change(base=DSA_MODEL, plan={"cp": 2, "dp": 4, "cp_comm_type": "all_gather"}),
        ("cp 2", "cp_comm_type 'all_gather'", "got 'p2p'"),
    ),
    Case(
        "dsa_tp_needs_sequence_parallel",
        # AbsorbedMLASelfAttention asserts sequence_parallel when tp > 1
        Change(base=DSA_MODEL, plan={"sequence_parallel": False, "tp_comm_overlap": False}),
        Change(base=DSA_MODEL),
        ("tp 2", "sequence_parallel=True"),
    ),
    Case(
        "dsa_index_share_within_chunk",
        # freq 4 from layer 3: layers 3, 7, 11, ... compute; the chunk of layers 5..8 starts
        # on layer 5, which reuses layer 3's top-k (Megatron's
        # _validate_dsa_index_share_pipeline_split); from layer 1: 1, 5, 9, ... compute
        Change(
            base=DSA_MODEL,
            model={"dsa_indexer_topk_freq": 4, "dsa_indexer_skip_topk_offset": 3},
        ),
        Change(
            base=DSA_MODEL,
            model={"dsa_indexer_topk_freq": 4, "dsa_indexer_skip_topk_offset": 1},
        ),
        ("layer 5 reuses the top-k of layer 3", "layers 5..8"),
    ),
    Case(
        "muon_excludes_hybrid",
        Change(base=HYBRID, job={"optimizer": "muon"}, plan=MUON_PLAN),
        Change(job={"optimizer": "muon"}, plan=MUON_PLAN),
        ("optimizer (muon)", "'nemotron-h-like'", "--optimizer adam"),
    ),
    Case(
        "lora_targets_in_model",
        Change(job={"lora": LoraSpec(rank=16, targets=("linear_qkv", "in_proj"))}),
        Change(base=HYBRID, job={"lora": LoraSpec(rank=16, targets=("linear_qkv", "in_proj"))}),
        ("LoRA targets in_proj", "linear_qkv, linear_proj, linear_fc1, linear_fc2"),
    ),
]
