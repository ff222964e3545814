"""Megatron-Bridge's H100 pretraining performance recipes, release by release, as configured.

Each `H100Recipe` is one configuration (parallel sizes, batch, precision) and the settings
its recipe ran beyond the columns a performance table prints (recompute, CUDA graphs,
token dispatcher, all-to-all overlap, pipeline layout, token drop). Entries cite the tag
and file of NVIDIA-NeMo/Megatron-Bridge they come from; identical configurations of
several releases are one entry. Only configurations are read here, never a published
throughput. Release ids are the NeMo containers: 25.09 = tag v0.1.0rc4 (``scripts/
performance/configs/*/*_llm_pretrain.yaml``, ``perf_matrix: h100``, with ``run_script.py``),
25.11 = v0.2.0 (``configs/*/workload_base_configs.py``, ``*_H100_*_BASE_CONFIG``), 26.02 =
v0.3.0, 26.04 = v0.4.0, 26.06 = v0.5.0 (``configs/*/*_workload_base_configs.py``,
``*_PRETRAIN_CONFIG_H100_*``), 26.08 = HEAD 067f987d / v0.6.0 (``src/megatron/bridge/
perf_recipes/*/h100/*.py``, functions ``*_pretrain_*gpu_h100_*_config``; its model
verification cards name 26.08 containers).

Common to every release (`row_options.MEGATRON_BRIDGE_PERF` and the FP8 weight rule
`precision_recipes.fp8_weight_fields`): distributed optimizer, overlapped gradient reduction and
parameter gather, bf16 gradient reduction, TE cross entropy; FP8 current scaling with FP8
parameter gather (``_perf_precision("fp8_cs")``, ``mixed_precision.py``).

Not covered (`NOT_EXPRESSIBLE`, `SKIPPED`): models without a preset, and fine-tuning,
vision-language and diffusion recipes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

RELEASE_TAGS = {
    "25.09": "v0.1.0rc4",
    "25.11": "v0.2.0",
    "26.02": "v0.3.0",
    "26.04": "v0.4.0",
    "26.06": "v0.5.0",
    "26.08": "HEAD 067f987d (v0.6.0)",
}
"""NeMo container -> Megatron-Bridge tag (module docstring)."""

LATER = ("26.02", "26.04", "26.06")
"""The releases with ``*_workload_base_configs.py`` V1/V2 configs."""


@dataclass(frozen=True, kw_only=True)
class H100Recipe:
    """One H100 pretraining configuration of one or more Megatron-Bridge releases."""

    key: str
    """Short unique id."""
    releases: tuple[str, ...]
    """NeMo containers that ship it (`RELEASE_TAGS`)."""
    cites: str
    """Tag, file and config (or function) names."""
    model: str
    """Model as the dev set spells Megatron-Bridge rows (release suffixes added by
    `h100_recipes.printed_model`)."""
    precision: str
    """``bf16``, ``fp8_cs`` (current scaling) or ``fp8_sc`` (blockwise sub-channel)."""
    num_gpus: int
    global_batch_size: int
    seq_length: int
    tp: int = 1
    pp: int = 1
    vpp: int = 1
    cp: int = 1
    ep: int = 1
    micro_batch_size: int = 1
    megatron_fsdp: bool = False
    token_drop: bool = False
    """25.09 ``apply_moe_token_drop`` (the rows labelled ``(tokendrop)``)."""
    plan_fields: dict[str, object] = field(default_factory=dict)
    """`ParallelPlan` fields of the recipe's full settings beyond the printed columns."""
    option_fields: dict[str, object] = field(default_factory=dict)
    """`ExecutionOptions` fields of the recipe's full settings."""
    unmodelled: tuple[str, ...] = ()
    """Recipe settings the cost model has no field for."""


ROUTER = frozenset({"moe_router", "moe_preprocess"})
ATTN_ROUTER = ROUTER | {"attn"}
NONE: dict[str, object] = {"recompute": "none", "recompute_modules": None}
MLA_MLP: dict[str, object] = {"recompute": "selective", "recompute_modules": ("mla_up_proj", "mlp")}
NORM_ACT: dict[str, object] = {
    "recompute": "selective",
    "recompute_modules": ("layernorm", "moe_act"),
}
FULL_5: dict[str, object] = {
    "recompute": "full",
    "recompute_method": "block",
    "recompute_num_layers": 5,
}
NO_GRAD_OVERLAP: dict[str, object] = {"overlap_grad_reduce": False, "overlap_param_gather": False}
"""``overlap_grad_reduce = False``; Megatron-core then gathers parameters without overlap
(``overlap_param_gather`` needs ``overlap_grad_reduce``)."""
DSV3_LAYOUT = {"pipeline_model_parallel_layout": "Et|(tt|)*30mL"}
KIMI_LAYOUT = {"pipeline_model_parallel_layout": "Et|(tt|)*30L"}
BLOCKWISE = ("FP8 blockwise (sub-channel) scaling, priced as per-tensor current scaling",)

LLAMA3_8B = dict(model="LLAMA3_8B", num_gpus=8, seq_length=8192, global_batch_size=128)
LLAMA3_70B = dict(model="LLAMA3_70B", num_gpus=64, seq_length=8192, tp=4, vpp=5)
LLAMA31_405B = dict(model="LLAMA3.1_405B", seq_length=8192, tp=8, pp=8, cp=2, vpp=8)
DSV3 = dict(model="DeepSeekV3", num_gpus=1024, seq_length=4096, tp=2, pp=8, ep=64)
QWEN3_30B = dict(model="Qwen3_30B_a3B", num_gpus=16, seq_length=4096)
QWEN3_235B = dict(model="Qwen3_235B_a22B", num_gpus=256, seq_length=4096, tp=2, pp=8, vpp=4, ep=32)
GPT_OSS = dict(model="GPT OSS 120B", num_gpus=64, seq_length=4096, pp=4, ep=8)
KIMI = dict(model="Kimi_K2", num_gpus=1024, seq_length=4096, tp=8, pp=16, vpp=2, ep=64)

V3 = "scripts/performance/configs"
HEAD = "src/megatron/bridge/perf_recipes"

RECIPES: tuple[H100Recipe, ...] = (
    # ---- Llama 3 8B ------------------------------------------------------------------
    H100Recipe(
        key="llama3-8b-bf16",
        releases=("25.09", "25.11", *LATER, "26.08"),
        cites=f"v0.1.0rc4 {V3}/llama3/llama3_8b_llm_pretrain.yaml h100 bf16; v0.2.0 "
        f"{V3}/llama3/workload_base_configs.py LLAMA3_8B_H100_BF16_BASE_CONFIG; v0.3.0-v0.5.0 "
        f"{V3}/llama/llama3_workload_base_configs.py LLAMA3_8B_PRETRAIN_CONFIG_H100_BF16_V1; "
        f"HEAD {HEAD}/llama/h100/llama3.py llama3_8b_pretrain_8gpu_h100_bf16_config",
        precision="bf16",
        cp=2,
        plan_fields=NONE,
        **LLAMA3_8B,
    ),
    H100Recipe(
        key="llama3-8b-fp8cs-fsdp",
        releases=("25.09",),
        cites=f"v0.1.0rc4 {V3}/llama3/llama3_8b_llm_pretrain.yaml h100 fp8_cs "
        "(use_megatron_fsdp, nccl_ub, keep_fp8_transpose_cache_when_using_custom_fsdp)",
        precision="fp8_cs",
        megatron_fsdp=True,
        plan_fields=NONE,
        unmodelled=(
            "NCCL user buffers (nccl_ub) for the FSDP collectives",
            "keep_fp8_transpose_cache_when_using_custom_fsdp (FP8 transpose caches kept)",
        ),
        **LLAMA3_8B,
    ),
    H100Recipe(
        key="llama3-8b-fp8cs",
        releases=("25.11", *LATER, "26.08"),
        cites=f"v0.2.0 {V3}/llama3/workload_base_configs.py LLAMA3_8B_H100_FP8_CS_BASE_CONFIG "
        "(recompute_num_layers=5); v0.3.0-v0.5.0 LLAMA3_8B_PRETRAIN_CONFIG_H100_FP8_CS_V1; HEAD "
        f"{HEAD}/llama/h100/llama3.py llama3_8b_pretrain_8gpu_h100_fp8cs_config "
        "(recompute_granularity full, method block, 5 layers)",
        precision="fp8_cs",
        plan_fields=FULL_5,
        **LLAMA3_8B,
    ),
    *(
        H100Recipe(
            key=f"llama3-8b-{p.replace('_', '')}-64gpu",
            releases=("26.08",),
            cites=f"HEAD {HEAD}/llama/h100/llama3.py llama3_8b_pretrain_64gpu_h100_"
            f"{p.replace('_', '')}_config (the 8-GPU recipe at global batch 1024)",
            precision=p,
            model="LLAMA3_8B",
            num_gpus=64,
            seq_length=8192,
            global_batch_size=1024,
            cp=cp,
            plan_fields=fields,
        )
        for p, cp, fields in (("bf16", 2, NONE), ("fp8_cs", 1, FULL_5))
    ),
    # ---- Llama 3 70B -----------------------------------------------------------------
    H100Recipe(
        key="llama3-70b-bf16",
        releases=("25.09", "25.11", *LATER),
        cites=f"v0.1.0rc4 {V3}/llama3/llama3_70b_llm_pretrain.yaml h100 bf16; v0.2.0 "
        "LLAMA3_70B_H100_BF16_BASE_CONFIG; v0.3.0-v0.5.0 LLAMA3_70B_PRETRAIN_CONFIG_H100_BF16_V1",
        precision="bf16",
        pp=4,
        cp=2,
        global_batch_size=128,
        plan_fields=NONE,
        **LLAMA3_70B,
    ),
    H100Recipe(
        key="llama3-70b-bf16-gbs256",
        releases=(*LATER, "26.08"),
        cites="v0.3.0-v0.5.0 LLAMA3_70B_PRETRAIN_CONFIG_H100_BF16_V2; HEAD "
        f"{HEAD}/llama/h100/llama3.py llama3_70b_pretrain_64gpu_h100_bf16_config",
        precision="bf16",
        pp=4,
        cp=2,
        global_batch_size=256,
        plan_fields=NONE,
        **LLAMA3_70B,
    ),
    H100Recipe(
        key="llama3-70b-fp8cs",
        releases=("25.09", "25.11", *LATER),
        cites=f"v0.1.0rc4 {V3}/llama3/llama3_70b_llm_pretrain.yaml h100 fp8_cs; v0.2.0 "
        "LLAMA3_70B_H100_FP8_CS_BASE_CONFIG; v0.3.0-v0.5.0 "
        "LLAMA3_70B_PRETRAIN_CONFIG_H100_FP8_CS_V1",
        precision="fp8_cs",
        pp=8,
        global_batch_size=128,
        plan_fields=NONE,
        **LLAMA3_70B,
    ),
    H100Recipe(
        key="llama3-70b-fp8cs-gbs256",
        releases=(*LATER,),
        cites="v0.3.0-v0.5.0 LLAMA3_70B_PRETRAIN_CONFIG_H100_FP8_CS_V2",
        precision="fp8_cs",
        pp=8,
        global_batch_size=256,
        plan_fields=NONE,
        **LLAMA3_70B,
    ),
    H100Recipe(
        key="llama3-70b-fp8cs-head",
        releases=("26.08",),
        cites=f"HEAD {HEAD}/llama/h100/llama3.py llama3_70b_pretrain_64gpu_h100_fp8cs_config "
        '(pipeline_model_parallel_layout "Et*2|(t*2|)*34,t*3|(t*2|)*3,tL")',
        precision="fp8_cs",
        pp=8,
        global_batch_size=256,
        plan_fields=NONE | {"pipeline_model_parallel_layout": "Et*2|(t*2|)*34,t*3|(t*2|)*3,tL"},
        **LLAMA3_70B,
    ),
    # ---- Llama 3.1 405B --------------------------------------------------------------
    *(
        H100Recipe(
            key=f"llama31-405b-{p.replace('_', '')}{suffix}",
            releases=releases,
            cites=cites,
            precision=p,
            num_gpus=gpus,
            global_batch_size=gbs,
            plan_fields=NONE,
            **LLAMA31_405B,
        )
        for p in ("bf16", "fp8_cs")
        for suffix, releases, gpus, gbs, cites in (
            (
                "",
                ("25.09", "25.11", *LATER),
                1024,
                512,
                f"v0.1.0rc4 {V3}/llama31/llama31_405b_llm_pretrain.yaml h100; v0.2.0 "
                f"LLAMA31_405B_H100_{p.upper()}_BASE_CONFIG; v0.3.0-v0.5.0 "
                f"LLAMA31_405B_PRETRAIN_CONFIG_H100_{p.upper()}_V1",
            ),
            (
                "-gbs1536",
                (*LATER, "26.08"),
                1024,
                1536,
                f"v0.3.0-v0.5.0 LLAMA31_405B_PRETRAIN_CONFIG_H100_{p.upper()}_V2; HEAD "
                f"{HEAD}/llama/h100/llama31.py llama31_405b_pretrain_1024gpu_h100_"
                f"{p.replace('_', '')}_config",
            ),
            (
                "-512gpu",
                ("26.08",),
                512,
                768,
                f"HEAD {HEAD}/llama/h100/llama31.py llama31_405b_pretrain_512gpu_h100_"
                f"{p.replace('_', '')}_config",
            ),
        )
    ),
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
"""Every H100 pretraining configuration of a model with a preset (module docstring)."""

NOT_EXPRESSIBLE: tuple[tuple[str, str, str], ...] = (
    (
        "Nemotron-H 56B",
        "v0.2.0-v0.5.0 NEMOTRONH_56B_*H100_FP8_CS*; HEAD perf_recipes/nemotronh/h100",
        "hybrid Mamba layers (no preset)",
    ),
    (
        "Nemotron 3 Nano",
        "v0.4.0, v0.5.0 NEMOTRON_3_NANO_PRETRAIN_CONFIG_H100_*",
        "hybrid Mamba + MoE layers (no preset)",
    ),
    (
        "Qwen3-Next 80B-A3B",
        "v0.2.0-v0.5.0 QWEN3_NEXT_80B_A3B_*H100_*",
        "gated DeltaNet linear-attention layers (no preset)",
    ),
    (
        "GLM-5",
        "HEAD perf_recipes/glm_moe_dsa/h100/glm5.py",
        "DeepSeek sparse attention (no preset)",
    ),
    (
        "DeepSeek-V3 on 64 H100",
        "HEAD perf_recipes/deepseek/h100/deepseek_v3.py deepseek_v3_pretrain_64gpu_h100_*_config",
        "tp 2, pp 8 and ep 64 need at least 512 GPUs (64 / (pp 8 x ep 64) < 1 expert data-"
        "parallel rank); the recipe keeps the 1024-GPU layout under a 64-GPU name",
    ),
    (
        "GPT-OSS 120B FP8-MX",
        "v0.4.0 GPT_OSS_120B_PRETRAIN_CONFIG_H100_FP8_MX_*",
        "MXFP8 on H100 (no MXFP8 tensor cores on Hopper; not priced)",
    ),
)
"""(model, configs, reason) of H100 pretraining recipes not priced."""

SKIPPED = (
    "SFT and LoRA (llama3 *_H100_SFT_* / *_LORA_*, perf_recipes llama3_*_sft_* / *_peft_*)",
    "vision-language (qwen_vl: Qwen3-VL, Qwen3.5-VL)",
    "diffusion (wan: WAN_14B_PRETRAIN_CONFIG_H100_BF16_V1, perf_recipes/wan/h100)",
    "DeepSeek-V3 FP8-SC large-scale config of v0.3.0 (the vp 4 layout at global batch 1024: "
    "the FP8-CS V1 layout priced above)",
)
"""Recipes left out by the brief's scope: pretraining only."""
