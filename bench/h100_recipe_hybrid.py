"""Megatron-Bridge's H100 pretraining recipes of hybrid Mamba-2 models (Nemotron 3 Nano,
Nemotron-H 56B, Nemotron 3 Super), release by release, as configured (`h100_recipe_table`;
the row path's rules are `hybrid_recipes`).

Nemotron 3 Nano: ``NEMOTRON_3_NANO_PRETRAIN_CONFIG_H100_{BF16,FP8_CS}_V1`` of
``scripts/performance/configs/nemotronh/nemotron_3_workload_base_configs.py`` (v0.4.0, v0.5.0;
v0.3.1, the 26.02.01 container, ships the same in ``nemotron_3_nano_workload_base_configs.py``)
on ``BASE_NEMOTRON_3_NANO_CONFIG`` (tp 1, etp 1, ep 8, HybridEP, Transformer Engine graphs), and
HEAD's ``perf_recipes/nemotronh/h100/nemotronh.py``. tp 1 keeps within the model's 2 query
groups (`specs` rule ``query_groups_divisible_by_tp``): no Nano H100 recipe runs tp > 1.

Nemotron-H 56B: ``NEMOTRONH_56B_H100_FP8_CS_BASE_CONFIG`` (v0.2.0 ``configs/nemotronh/
workload_base_configs.py``), ``NEMOTRONH_56B_PRETRAIN_CONFIG_H100_FP8_CS_V1`` (v0.3.0-v0.5.0
``nemotronh_workload_base_configs.py``) and HEAD's
``nemotronh_56b_pretrain_64gpu_h100_fp8cs_config``: the one layout in every release.

Nemotron 3 Super: HEAD's ``nemotron_3_super_pretrain_64gpu_h100_bf16_config``, whose settings
the row path takes from `super_recipes` (``SUPER_H100``); no earlier release ships an H100
Super configuration.
"""

from __future__ import annotations

from h100_recipe_schema import HEAD, LATER, V3, H100Recipe
from super_recipes import SUPER_H100_OPTIONS, SUPER_H100_PLAN

ATTN_MAMBA = frozenset({"attn", "mamba"})
NANO = dict(model="Nemotron_3_Nano", num_gpus=16, seq_length=8192, global_batch_size=1024, ep=8)
NANO_V1 = f"{V3}/nemotronh/nemotron_3_workload_base_configs.py NEMOTRON_3_NANO_PRETRAIN_CONFIG_H100"
NANO_HEAD = f"HEAD {HEAD}/nemotronh/h100/nemotronh.py nemotron_3_nano_pretrain_16gpu_h100"
HYBRIDEP: dict[str, object] = {"moe_dispatcher": "flex"}

NULL_TOKENIZER = (
    "vocabulary: the base recipe's NullTokenizer of 32000 tokens (DEFAULT_NULL_TOKENIZER_"
    "VOCAB_SIZE; MambaModelProvider without vocab_size, recipes/nemotronh/nemotronh.py at "
    "v0.4.0-v0.5.0 and HEAD; v0.2.0 and v0.3.0 not read), priced at the preset's 131072",
)

HYBRID_RECIPES: tuple[H100Recipe, ...] = (
    # ---- Nemotron 3 Nano 30B-A3B -----------------------------------------------------
    H100Recipe(
        key="nemotron-3-nano-bf16",
        releases=("26.04", "26.06", "26.08"),
        cites=f"v0.4.0, v0.5.0 {NANO_V1}_BF16_V1 (recompute_modules moe, layernorm; "
        f'cuda_graph_scope ["attn", "mamba"]; hybridep); {NANO_HEAD}_bf16_config',
        precision="bf16",
        plan_fields={"recompute": "selective", "recompute_modules": ("moe", "layernorm")},
        option_fields=HYBRIDEP | {"cuda_graph_scopes": ATTN_MAMBA},
        **NANO,
    ),
    H100Recipe(
        key="nemotron-3-nano-fp8cs",
        releases=("26.04", "26.06"),
        cites=f"v0.4.0, v0.5.0 {NANO_V1}_FP8_CS_V1 (recompute_modules moe, layernorm, "
        'core_attn, moe_act; cuda_graph_scope ["mamba"]; hybridep)',
        precision="fp8_cs",
        plan_fields={
            "recompute": "selective",
            "recompute_modules": ("moe", "layernorm", "core_attn", "moe_act"),
        },
        option_fields=HYBRIDEP | {"cuda_graph_scopes": frozenset({"mamba"})},
        **NANO,
    ),
    H100Recipe(
        key="nemotron-3-nano-fp8cs-head",
        releases=("26.08",),
        cites=f"{NANO_HEAD}_fp8cs_config (expert_model_parallel_size 16; recompute_modules "
        'layernorm; set_cuda_graph_modules ["attn", "mamba"]; hybridep)',
        precision="fp8_cs",
        plan_fields={"recompute": "selective", "recompute_modules": ("layernorm",)},
        option_fields=HYBRIDEP | {"cuda_graph_scopes": ATTN_MAMBA},
        **(NANO | {"ep": 16}),
    ),
    # ---- Nemotron-H 56B --------------------------------------------------------------
    H100Recipe(
        key="nemotron-h-56b-fp8cs",
        releases=("25.11", *LATER, "26.08"),
        cites=f"v0.2.0 {V3}/nemotronh/workload_base_configs.py NEMOTRONH_56B_H100_FP8_CS_BASE_"
        f"CONFIG; v0.3.0-v0.5.0 {V3}/nemotronh/nemotronh_workload_base_configs.py "
        f"NEMOTRONH_56B_PRETRAIN_CONFIG_H100_FP8_CS_V1; HEAD {HEAD}/nemotronh/h100/"
        "nemotronh.py nemotronh_56b_pretrain_64gpu_h100_fp8cs_config (tp 8, cuda_graph_scope "
        '["mamba"]); base recipe nemotronh_56b_pretrain_config: tp_comm_overlap, '
        "overlap_param_gather False, no recompute",
        model="NemotronH_56B",
        precision="fp8_cs",
        num_gpus=64,
        seq_length=8192,
        global_batch_size=192,
        tp=8,
        plan_fields={
            "recompute": "none",
            "recompute_modules": None,
            "tp_comm_overlap": True,
            "overlap_param_gather": False,
        },
        option_fields={"cuda_graph_scopes": frozenset({"mamba"})},
        unmodelled=NULL_TOKENIZER,
    ),
    # ---- Nemotron 3 Super 120B-A12B --------------------------------------------------
    H100Recipe(
        key="nemotron-3-super-bf16-head",
        releases=("26.08",),
        cites=f"HEAD {HEAD}/nemotronh/h100/nemotronh.py nemotron_3_super_pretrain_64gpu_h100_"
        "bf16_config on recipes/nemotronh/h100/nemotron_3_super.py _nemotron_3_super_"
        "pretrain_64gpu_h100_bf16_config (tp 1, pp 2, ep 32, sequence 4096, global batch "
        "1280; capacity 1.10 padded; recompute_modules layernorm, moe_act, moe, core_attn; "
        "no graphs; precision-aware optimizer, fp16 main params, bf16 moments; no DDP "
        "overlap)",
        model="Nemotron_3_Super",
        precision="bf16",
        num_gpus=64,
        seq_length=4096,
        global_batch_size=1280,
        pp=2,
        ep=32,
        plan_fields=dict(SUPER_H100_PLAN),
        option_fields=dict(SUPER_H100_OPTIONS),
        unmodelled=(
            "moe_hybridep_pad_uneven_dispatch_inputs False and moe_flex_dispatcher_num_sms 32 "
            "(HybridEP's SM share, not priced)",
        ),
    ),
)
"""The H100 pretraining configurations of the hybrid models."""
