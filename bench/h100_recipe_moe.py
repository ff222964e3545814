"""Megatron-Bridge's H100 pretraining recipes of mixture-of-experts models (DeepSeek-V3,
Qwen3 30B-A3B, Qwen3 235B-A22B, GPT-OSS 120B, Kimi-K2), release by release, as configured
(`h100_recipe_table`)."""

from __future__ import annotations

from h100_recipe_schema import HEAD, LATER, NONE, RELEASE_TAGS, V3, H100Recipe

ROUTER = frozenset({"moe_router", "moe_preprocess"})
ATTN_ROUTER = ROUTER | {"attn"}
MLA_MLP: dict[str, object] = {"recompute": "selective", "recompute_modules": ("mla_up_proj", "mlp")}
NORM_ACT: dict[str, object] = {
    "recompute": "selective",
    "recompute_modules": ("layernorm", "moe_act"),
}
NO_GRAD_OVERLAP: dict[str, object] = {"overlap_grad_reduce": False, "overlap_param_gather": False}
"""``overlap_grad_reduce = False``; Megatron-core then gathers parameters without overlap
(``overlap_param_gather`` needs ``overlap_grad_reduce``)."""
DSV3_LAYOUT = {"pipeline_model_parallel_layout": "Et|(tt|)*30mL"}
KIMI_LAYOUT = {"pipeline_model_parallel_layout": "Et|(tt|)*30L"}
BLOCKWISE = ("FP8 blockwise (sub-channel) scaling, priced as per-tensor current scaling",)

DSV3 = dict(model="DeepSeekV3", num_gpus=1024, seq_length=4096, tp=2, pp=8, ep=64)
QWEN3_30B = dict(model="Qwen3_30B_a3B", num_gpus=16, seq_length=4096)
QWEN3_235B = dict(model="Qwen3_235B_a22B", num_gpus=256, seq_length=4096, tp=2, pp=8, vpp=4, ep=32)
GPT_OSS = dict(model="GPT OSS 120B", num_gpus=64, seq_length=4096, pp=4, ep=8)
KIMI = dict(model="Kimi_K2", num_gpus=1024, seq_length=4096, tp=8, pp=16, vpp=2, ep=64)

MOE_RECIPES: tuple[H100Recipe, ...] = (
    # ---- DeepSeek-V3 -----------------------------------------------------------------
    H100Recipe(
        key="deepseek-v3-25.09",
        releases=("25.09",),
        cites=f"v0.1.0rc4 {V3}/deepseek/deepseek_v3_llm_pretrain.yaml h100 (bf16, fp8_cs) "
        "and scripts/performance/run_script.py (H100: DeepEP, A2A_1F1B overlap, "
        'recompute_modules ["mla_up_proj", "mlp"], overlap_grad_reduce False, layout '
        '"Et|(tt|)*30mL")',
        precision="fp8_cs",
        vpp=4,
        global_batch_size=8192,
        plan_fields=MLA_MLP | DSV3_LAYOUT | NO_GRAD_OVERLAP,
        option_fields={"moe_dispatcher": "flex", "moe_a2a_overlap": True},
        **DSV3,
    ),
    H100Recipe(
        key="deepseek-v3-25.11",
        releases=("25.11",),
        cites=f"v0.2.0 {V3}/deepseek/workload_base_configs.py DEEPSEEK_V3_H100_BASE_CONFIG "
        '(moe_flex_dispatcher_backend "deepep", moe_a2a_overlap) and deepseek_llm_pretrain.py',
        precision="fp8_cs",
        vpp=4,
        global_batch_size=8192,
        plan_fields=MLA_MLP | DSV3_LAYOUT,
        option_fields={"moe_dispatcher": "flex", "moe_a2a_overlap": True},
        **DSV3,
    ),
    *(
        H100Recipe(
            key=f"deepseek-v3-{p.replace('_', '')}-gbs{gbs}",
            releases=LATER,
            cites=f"v0.3.0-v0.5.0 {V3}/deepseek/deepseek_workload_base_configs.py "
            f"DEEPSEEK_V3_PRETRAIN_CONFIG_H100_{p.upper()}_{v} (hybridep)",
            precision=p,
            vpp=4,
            global_batch_size=gbs,
            plan_fields=MLA_MLP | DSV3_LAYOUT,
            option_fields={"moe_dispatcher": "flex", "moe_a2a_overlap": False},
            **DSV3,
        )
        for p in ("bf16", "fp8_cs")
        for v, gbs in (("V1", 8192), ("V2", 16384))
    ),
    H100Recipe(
        key="deepseek-v3-fp8sc-vp2",
        releases=LATER,
        cites="v0.3.0-v0.5.0 DEEPSEEK_V3_PRETRAIN_CONFIG_H100_FP8_SC_V2 (vp 2, no layout: "
        "the recipe's default layout map, recipes/deepseek/h100/deepseek_v3.py (8, 2))",
        precision="fp8_sc",
        vpp=2,
        global_batch_size=16384,
        plan_fields=MLA_MLP,
        option_fields={"moe_dispatcher": "flex", "moe_a2a_overlap": False},
        unmodelled=BLOCKWISE,
        **DSV3,
    ),
    H100Recipe(
        key="deepseek-v3-fp8sc-large-scale",
        releases=("26.04", "26.06"),
        cites="v0.4.0, v0.5.0 DEEPSEEK_V3_PRETRAIN_CONFIG_H100_FP8_SC_LARGE_SCALE (vp 2, no "
        "layout, global batch 1024)",
        precision="fp8_sc",
        vpp=2,
        global_batch_size=1024,
        plan_fields=MLA_MLP,
        option_fields={"moe_dispatcher": "flex", "moe_a2a_overlap": False},
        unmodelled=BLOCKWISE,
        **DSV3,
    ),
    *(
        H100Recipe(
            key=f"deepseek-v3-fp8sc-vp2-{suffix}",
            releases=("26.08",),
            cites=f"HEAD {HEAD}/deepseek/h100/deepseek_v3.py {name} (the fp8cs recipe at vp 2 "
            "with the (8, 2) layout of recipes/deepseek/h100/deepseek_v3.py)",
            precision="fp8_sc",
            vpp=2,
            global_batch_size=gbs,
            plan_fields=MLA_MLP | NO_GRAD_OVERLAP,
            unmodelled=(*BLOCKWISE, "token dispatcher: the base recipe's (not read)"),
            **DSV3,
        )
        for suffix, name, gbs in (
            ("head", "deepseek_v3_pretrain_1024gpu_h100_fp8sc_config", 16384),
            (
                "large-scale-head",
                "deepseek_v3_pretrain_1024gpu_h100_fp8sc_large_scale_config",
                1024,
            ),
        )
    ),
    *(
        H100Recipe(
            key=f"deepseek-v3-{p.replace('_', '')}-head",
            releases=("26.08",),
            cites=f"HEAD {HEAD}/deepseek/h100/deepseek_v3.py deepseek_v3_pretrain_1024gpu_h100_"
            f"{p.replace('_', '')}_config (overlap_grad_reduce False)",
            precision=p,
            vpp=4,
            global_batch_size=16384,
            plan_fields=MLA_MLP | DSV3_LAYOUT | NO_GRAD_OVERLAP,
            unmodelled=("token dispatcher: the base recipe's (not read)",),
            **DSV3,
        )
        for p in ("bf16", "fp8_cs")
    ),
    # ---- Qwen3 30B-A3B ---------------------------------------------------------------
    *(
        H100Recipe(
            key=f"qwen3-30b-a3b-{p.replace('_', '')}-25.09",
            releases=("25.09",),
            cites=f"v0.1.0rc4 {V3}/qwen3/qwen3_30b_a3b_llm_pretrain.yaml h100 {p} (mbs {mbs}); "
            "run_script.py apply_moe_token_drop",
            precision=p,
            pp=2,
            vpp=12,
            ep=8,
            micro_batch_size=mbs,
            global_batch_size=512,
            token_drop=True,
            plan_fields=NONE,
            option_fields={"moe_dispatcher": "alltoall", "cuda_graph_scopes": frozenset()},
            **QWEN3_30B,
        )
        for p, mbs in (("bf16", 1), ("fp8_cs", 2))
    ),
    *(
        H100Recipe(
            key=f"qwen3-30b-a3b-{p.replace('_', '')}-{release}",
            releases=(release,),
            cites=f"{RELEASE_TAGS[release]} {name} (moe_a2a_overlap{backend})",
            precision=p,
            pp=2,
            vpp=12,
            ep=8,
            global_batch_size=gbs,
            plan_fields=NONE,
            option_fields={
                "moe_dispatcher": "flex" if backend else "alltoall",
                "moe_a2a_overlap": True,
                "cuda_graph_scopes": ROUTER if p == "bf16" else frozenset(),
            },
            **QWEN3_30B,
        )
        for release, gbs, backend, name in (
            ("25.11", 512, "", f"{V3}/qwen3/workload_base_configs.py QWEN3_30B_A3B_H100_*"),
            (
                "26.02",
                1024,
                ", deepep",
                f"{V3}/qwen/qwen3_workload_base_configs.py QWEN3_30B_A3B_PRETRAIN_CONFIG_H100_*_V1",
            ),
        )
        for p in ("bf16", "fp8_cs")
    ),
    *(
        H100Recipe(
            key=f"qwen3-30b-a3b-{p.replace('_', '')}-ep16",
            releases=("26.04", "26.06"),
            cites=f"v0.4.0, v0.5.0 {V3}/qwen/qwen3_workload_base_configs.py "
            f"QWEN3_30B_A3B_PRETRAIN_CONFIG_H100_{p.upper()}_V1 (hybridep)",
            precision=p,
            ep=16,
            global_batch_size=1024,
            plan_fields=NONE,
            option_fields={
                "moe_dispatcher": "flex",
                "moe_a2a_overlap": False,
                "cuda_graph_scopes": ROUTER if p == "bf16" else frozenset(),
            },
            **QWEN3_30B,
        )
        for p in ("bf16", "fp8_cs")
    ),
    *(
        H100Recipe(
            key=f"qwen3-30b-a3b-{p.replace('_', '')}-head",
            releases=("26.08",),
            cites=f"HEAD {HEAD}/qwen/h100/qwen3_moe.py qwen3_30b_a3b_pretrain_16gpu_h100_"
            f"{p.replace('_', '')}_config{base}",
            precision=p,
            ep=16,
            global_batch_size=1024,
            plan_fields=NONE,
            option_fields={"moe_dispatcher": "flex"} | fields,
            **QWEN3_30B,
        )
        for p, base, fields in (
            (
                "bf16",
                " (base recipes/qwen/h100/qwen3_moe.py: hybridep, moe_router and moe_preprocess "
                "graphs; overlap_moe_expert_parallel_comm)",
                {"moe_a2a_overlap": True, "cuda_graph_scopes": ROUTER},
            ),
            ("fp8_cs", "", {"moe_a2a_overlap": False, "cuda_graph_scopes": ATTN_ROUTER}),
        )
    ),
    # ---- Qwen3 235B-A22B -------------------------------------------------------------
    H100Recipe(
        key="qwen3-235b-a22b-25.09",
        releases=("25.09",),
        cites=f"v0.1.0rc4 {V3}/qwen3/qwen3_235b_a22b_llm_pretrain.yaml h100 (bf16, fp8_cs); "
        "run_script.py apply_moe_token_drop",
        precision="fp8_cs",
        global_batch_size=2048,
        token_drop=True,
        plan_fields=NONE,
        option_fields={"moe_dispatcher": "alltoall", "moe_a2a_overlap": False},
        **QWEN3_235B,
    ),
    *(
        H100Recipe(
            key=f"qwen3-235b-a22b-{p.replace('_', '')}-gbs{gbs}",
            releases=releases,
            cites=cites.replace("P", p.upper()),
            precision=p,
            global_batch_size=gbs,
            plan_fields=NONE,
            option_fields={"moe_dispatcher": "alltoall", "moe_a2a_overlap": True},
            **QWEN3_235B,
        )
        for p in ("bf16", "fp8_cs")
        for releases, gbs, cites in (
            (
                ("25.11", *LATER),
                2048,
                "v0.2.0 QWEN3_235B_A22B_H100_P_BASE_CONFIG; v0.3.0-v0.5.0 "
                "QWEN3_235B_A22B_PRETRAIN_CONFIG_H100_P_V1 (moe_a2a_overlap, no backend)",
            ),
            (
                (*LATER, "26.08"),
                8192,
                "v0.3.0-v0.5.0 QWEN3_235B_A22B_PRETRAIN_CONFIG_H100_P_V2; HEAD "
                f"{HEAD}/qwen/h100/qwen3_moe.py qwen3_235b_a22b_pretrain_256gpu_h100_*_config "
                "(alltoall, overlap_moe_expert_parallel_comm)",
            ),
        )
    ),
    H100Recipe(
        key="qwen3-235b-a22b-fp8cs-gbs512",
        releases=LATER,
        cites="v0.3.0-v0.5.0 QWEN3_235B_A22B_PRETRAIN_CONFIG_H100_FP8_CS_LARGE_SCALE",
        precision="fp8_cs",
        global_batch_size=512,
        plan_fields=NONE,
        option_fields={"moe_dispatcher": "alltoall", "moe_a2a_overlap": True},
        **QWEN3_235B,
    ),
    # ---- GPT-OSS 120B ----------------------------------------------------------------
    *(
        H100Recipe(
            key=f"gpt-oss-120b-{p.replace('_', '')}-gbs{gbs}",
            releases=releases,
            cites=cites,
            precision=p,
            global_batch_size=gbs,
            plan_fields=NORM_ACT,
            option_fields={"moe_dispatcher": "alltoall", "moe_a2a_overlap": False},
            **GPT_OSS,
        )
        for p, releases, gbs, cites in (
            (
                "bf16",
                ("25.11", *LATER),
                512,
                f"v0.2.0 {V3}/gpt_oss/workload_base_configs.py GPT_OSS_120B_H100_BF16_BASE_CONFIG "
                '(recompute_modules ["layernorm", "moe_act"]); v0.3.0-v0.5.0 '
                "GPT_OSS_120B_PRETRAIN_CONFIG_H100_BF16_V1",
            ),
            ("bf16", LATER, 1280, "v0.3.0-v0.5.0 GPT_OSS_120B_PRETRAIN_CONFIG_H100_BF16_V2"),
            ("fp8_cs", ("26.06",), 512, "v0.5.0 GPT_OSS_120B_PRETRAIN_CONFIG_H100_FP8_CS_V1"),
            ("fp8_cs", ("26.06",), 1280, "v0.5.0 GPT_OSS_120B_PRETRAIN_CONFIG_H100_FP8_CS_V2"),
        )
    ),
    *(
        H100Recipe(
            key=f"gpt-oss-120b-{p.replace('_', '')}-head",
            releases=("26.08",),
            cites=f"HEAD {HEAD}/gpt_oss/h100/gpt_oss.py gpt_oss_120b_pretrain_64gpu_h100_"
            f"{p.replace('_', '')}_config (selective layernorm, moe_act)",
            precision=p,
            global_batch_size=1280,
            plan_fields=NORM_ACT,
            unmodelled=("token dispatcher: the base recipe's (not read)",),
            **GPT_OSS,
        )
        for p in ("bf16", "fp8_cs")
    ),
    # ---- Kimi-K2 ---------------------------------------------------------------------
    *(
        H100Recipe(
            key=f"kimi-k2-{p.replace('_', '')}",
            releases=("26.04", "26.06", "26.08"),
            cites=f"v0.4.0, v0.5.0 {V3}/kimi/kimi_workload_base_configs.py "
            f"KIMI_K2_PRETRAIN_CONFIG_H100_{p.upper()}; HEAD {HEAD}/kimi/h100/kimi_k2.py "
            f"kimi_k2_pretrain_1024gpu_h100_{p.replace('_', '')}_config; kimi_llm_pretrain.py "
            "kimi_k2_pretrain_config_h100: optimizer_type muon, overlap_grad_reduce False",
            precision=p,
            global_batch_size=8192,
            plan_fields=MLA_MLP | KIMI_LAYOUT | NO_GRAD_OVERLAP,
            option_fields={"moe_dispatcher": "alltoall"},
            **KIMI,
        )
        for p in ("bf16", "fp8_cs")
    ),
)
"""The H100 pretraining configurations of the mixture-of-experts models, model by model."""
