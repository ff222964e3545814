"""Megatron-Bridge's H100 pretraining recipes of dense models (Llama 3 8B, Llama 3 70B,
Llama 3.1 405B), release by release, as configured (`h100_recipe_table`)."""

from __future__ import annotations

from h100_recipe_schema import HEAD, LATER, NONE, V3, H100Recipe

FULL_5: dict[str, object] = {
    "recompute": "full",
    "recompute_method": "block",
    "recompute_num_layers": 5,
}

LLAMA3_8B = dict(model="LLAMA3_8B", num_gpus=8, seq_length=8192, global_batch_size=128)
LLAMA3_70B = dict(model="LLAMA3_70B", num_gpus=64, seq_length=8192, tp=4, vpp=5)
LLAMA31_405B = dict(model="LLAMA3.1_405B", seq_length=8192, tp=8, pp=8, cp=2, vpp=8)

DENSE_RECIPES: tuple[H100Recipe, ...] = (
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
)
"""The H100 pretraining configurations of the dense models, model by model."""
