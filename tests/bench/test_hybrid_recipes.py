"""bench/hybrid_recipes.py and bench/super_recipes.py: what the Megatron-Bridge Nemotron 3
Nano, Nemotron 3 Super and Nemotron-H 56B recipes ran beyond their printed plan, checked
against the configs their module docstrings cite (``scripts/performance/configs/
nemotronh/``), and the trust C pricing of the Nano and Super rows."""

from __future__ import annotations

import dataclasses

import pytest

from tests.bench.bench_loader import load_bench
from tests.bench.published_row_cases import NANO_GB300, row_with

hybrid = load_bench("hybrid_recipes")
rows_mod = load_bench("published_rows")
trust_c = load_bench("trust_c_rows")

NANO_BLACKWELL = frozenset({"attn", "mamba", "moe_router", "moe_preprocess"})
"""``BASE_NEMOTRON_3_NANO_CONFIG.cuda_graph_scope`` (v0.3.1 to v0.5.1)."""


def nano(source: str, gpu: str, precision: str = "MXFP8") -> dict[str, str]:
    return row_with(NANO_GB300, source_id=source, gpu_type=gpu, precision=precision)


@pytest.mark.parametrize(
    "raw",
    [
        # row 279: v0.3.1 nemotron_3_nano_workload_base_configs.py ..._GB300_FP8_MX_V1.
        nano("MBRIDGE-26.02.01", "GB300 (NVL72)"),
        # row 194: llmb-r0.4.1 nemotron_3_workload_base_configs.py ..._B200_FP8_MX_V1.
        nano("MBRIDGE-26.04.01", "B200"),
        # row 110: v0.5.1, the same base config.
        nano("MBRIDGE-26.06.01", "GB300 (NVL72)"),
    ],
)
def test_blackwell_nano_rows_run_hybridep_with_attn_mamba_and_router_graphs(raw):
    assert hybrid.hybrid_runtime_fields(raw) == {
        "moe_dispatcher": "flex",  # moe_flex_dispatcher_backend="hybridep"
        "cuda_graph_scopes": NANO_BLACKWELL,
    }
    # recompute_granularity None in recipes/nemotronh/nemotron_3_nano.py; no modules set.
    assert hybrid.hybrid_plan_fields(raw, 1, False) == {}


def test_no_nano_config_before_26_02_01():
    # v0.3.0 (26.02) ships nemotronh_56b configs only.
    assert hybrid.hybrid_runtime_fields(nano("MBRIDGE-26.02", "GB300 (NVL72)")) == {}


@pytest.mark.parametrize(
    ("source", "precision", "scopes", "modules"),
    [
        # v0.4.0 NEMOTRON_3_NANO_PRETRAIN_CONFIG_H100_BF16_V1.
        ("MBRIDGE-26.04", "BF16", {"attn", "mamba"}, ("moe", "layernorm")),
        # v0.5.0 NEMOTRON_3_NANO_PRETRAIN_CONFIG_H100_FP8_CS_V1.
        ("MBRIDGE-26.06", "FP8", {"mamba"}, ("moe", "layernorm", "core_attn", "moe_act")),
        # HEAD nemotron_3_nano_pretrain_16gpu_h100_fp8cs_config.
        ("MBRIDGE-26.08", "FP8", {"attn", "mamba"}, ("layernorm",)),
    ],
)
def test_h100_nano_recipes_capture_and_recompute_per_precision(source, precision, scopes, modules):
    raw = nano(source, "H100", precision)
    assert hybrid.hybrid_runtime_fields(raw)["cuda_graph_scopes"] == frozenset(scopes)
    assert hybrid.hybrid_plan_fields(raw, 1, False) == {
        "recompute": "selective",
        "recompute_modules": modules,
    }


def test_nemotron_h_56b_overlaps_tp_but_not_the_parameter_gather():
    raw = row_with(nano("MBRIDGE-26.04", "H100", "FP8"), model="NemotronH_56B")
    # NEMOTRONH_56B_PRETRAIN_CONFIG_H100_FP8_CS_V1: cuda_graph_scope ["mamba"].
    assert hybrid.hybrid_runtime_fields(raw) == {"cuda_graph_scopes": frozenset({"mamba"})}
    gb200 = row_with(raw, gpu_type="GB200 (NVL72)")
    assert hybrid.hybrid_runtime_fields(gb200)["cuda_graph_scopes"] == {"mamba", "attn"}
    # nemotronh_56b_pretrain_config: CommOverlapConfig(tp_comm_overlap=True),
    # ddp.overlap_param_gather = False.
    assert hybrid.hybrid_plan_fields(raw, 8, True) == {
        "tp_comm_overlap": True,
        "overlap_param_gather": False,
    }


def test_other_rows_take_nothing_from_the_hybrid_rules():
    qwen = row_with(NANO_GB300, model="Qwen3_30B_a3B")
    assert hybrid.hybrid_runtime_fields(qwen) == {}
    assert hybrid.hybrid_plan_fields(qwen, 1, False) == {}
    zoo = row_with(NANO_GB300, source_id="MOEZOO-QWEN3-GB200")
    assert hybrid.hybrid_runtime_fields(zoo) == {}


def test_the_nano_row_path_carries_the_recipe():
    case = rows_mod.case_for_row(NANO_GB300)
    assert (case.plan.tp, case.plan.ep, case.plan.etp, case.plan.micro_batch_size) == (1, 8, 1, 4)
    assert not case.plan.sequence_parallel and case.plan.recompute == "none"
    assert case.options.moe_dispatcher == "flex"
    assert case.options.cuda_graph_scopes == NANO_BLACKWELL
    assert case.options.fp8_recipe == "mxfp8" and case.options.cudnn_norm


def test_the_mamba_scope_changes_no_priced_term():
    from costmodel.estimate import estimate_plan
    from profiles.store import load_profile

    case = rows_mod.case_for_row(NANO_GB300)
    profile = load_profile(case.profile)

    def seconds(scopes: frozenset[str]) -> float:
        options = dataclasses.replace(case.options, cuda_graph_scopes=scopes)
        args = (case.model, case.cluster, case.job, case.plan, profile)
        return estimate_plan(*args, options=options).iteration_time_s

    assert seconds(NANO_BLACKWELL) == seconds(NANO_BLACKWELL - {"mamba"})


def super_row(source: str, gpu: str, precision: str, tp: int, ep: int) -> dict[str, str]:
    """A Nemotron 3 Super row as the dev set prints it (rows 112-115, 141-146, 196-203,
    239-246): 64 GPUs, global batch 512, micro-batch 1, no architecture columns."""
    return row_with(
        NANO_GB300,
        row_id="9100",
        source_id=source,
        model="Nemotron_3_Super",
        gpu_type=gpu,
        precision=precision,
        num_gpus="64",
        tp=str(tp),
        ep=str(ep),
        dp=str(64 // tp),
        global_batch_size="512",
        micro_batch_size="1",
        grad_accum=str(512 // (64 // tp)),
        tokens_per_sec_per_gpu="8000",
    )


SUPER_GRAPHS = frozenset({"attn", "mamba", "moe_router", "moe_preprocess"})


@pytest.mark.parametrize(
    ("raw", "scopes", "modules"),
    [
        # BASE_NEMOTRON_3_SUPER_CONFIG (v0.4.0 to v0.5.1): HybridEP, graphs, no recompute.
        (super_row("MBRIDGE-26.06.01", "GB300 (NVL72)", "MXFP8", 1, 64), SUPER_GRAPHS, None),
        (super_row("MBRIDGE-26.04", "GB200 (NVL72)", "NVFP4", 2, 64), SUPER_GRAPHS, None),
        # ..._B300_NVFP4_V1 = ..._B300_BF16_V1: recompute moe_act, layernorm.
        (super_row("MBRIDGE-26.06", "B300", "NVFP4", 1, 8), SUPER_GRAPHS, ("moe_act", "layernorm")),
        (super_row("MBRIDGE-26.06", "B300", "MXFP8", 1, 8), SUPER_GRAPHS, None),
        # BASE_NEMOTRON_3_SUPER_CONFIG_B200: no graphs, recompute moe_act, layernorm.
        (super_row("MBRIDGE-26.04", "B200", "MXFP8", 1, 64), frozenset(), ("moe_act", "layernorm")),
        # ..._B200_NVFP4_V1: tp 2, graphs back, no recompute.
        (super_row("MBRIDGE-26.04.01", "B200", "NVFP4", 2, 64), SUPER_GRAPHS, None),
    ],
)
def test_super_rows_take_their_configs(raw, scopes, modules):
    assert hybrid.hybrid_preset(raw) == "nemotron-3-super"
    assert hybrid.hybrid_runtime_fields(raw) == {
        "moe_dispatcher": "flex",
        "cuda_graph_scopes": scopes,
    }
    fields = hybrid.hybrid_plan_fields(raw, int(raw["tp"]), True)
    assert fields == (
        {} if modules is None else {"recompute": "selective", "recompute_modules": modules}
    )
    case = rows_mod.case_for_row(raw)
    assert case.model.moe_latent_size == 1024 and case.model.mtp_repeated_layer
    assert case.plan.recompute_modules == modules


def test_b200_bf16_configs_by_release():
    # v0.4.0 ..._B200_BF16_V1: ep 64, no graphs, four modules; v0.5.1: graphs, three.
    old = super_row("MBRIDGE-26.04", "B200", "BF16", 1, 64)
    new = super_row("MBRIDGE-26.06.01", "B200", "BF16", 2, 8)
    assert hybrid.hybrid_runtime_fields(old)["cuda_graph_scopes"] == frozenset()
    assert hybrid.hybrid_runtime_fields(new)["cuda_graph_scopes"] == SUPER_GRAPHS
    assert hybrid.hybrid_plan_fields(old, 1, True)["recompute_modules"] == (
        "moe_act",
        "moe",
        "layernorm",
        "core_attn",
    )
    assert hybrid.hybrid_plan_fields(new, 2, True)["recompute_modules"] == (
        "moe_act",
        "layernorm",
        "core_attn",
    )


def test_nano_and_super_rows_are_priced_apart_and_fit():
    raw = super_row("MBRIDGE-26.06.01", "GB300 (NVL72)", "MXFP8", 1, 64)
    priced_nano, priced_super = trust_c.trust_c_report([NANO_GB300, raw])
    assert priced_nano["priced"] and priced_nano["fits"]
    # 512 x 8192 tokens over 8 GPUs at 37664 tokens/s per GPU.
    assert priced_nano["published_s"] == pytest.approx(512 * 8192 / (37664 * 8))
    assert priced_super["priced"] and priced_super["fits"]
    assert priced_super["published_s"] == pytest.approx(512 * 8192 / (8000 * 64))


def test_the_h100_super_row_takes_heads_config():
    # HEAD recipes/nemotronh/h100/nemotron_3_super.py _nemotron_3_super_pretrain_64gpu_h100_
    # bf16_config: tp 1, pp 2, ep 32, capacity 1.10 padded, four recompute modules, no
    # graphs, fp16 main params and bf16 moments, no DDP overlap.
    raw = super_row("MBRIDGE-26.08", "H100", "BF16", 1, 32)
    raw = row_with(raw, pp="2", dp="32", global_batch_size="1280", seq_length="4096")
    case = rows_mod.case_for_row(raw)
    assert case.model.moe_capacity_factor == 1.10
    assert case.plan.recompute_modules == ("layernorm", "moe_act", "moe", "core_attn")
    assert not (case.plan.overlap_grad_reduce or case.plan.overlap_param_gather)
    assert case.options.precision_aware_optimizer and case.options.main_params_dtype == "fp16"
    assert case.options.cuda_graph_scopes == frozenset()
    # the Blackwell rows stay dropless
    blackwell = rows_mod.case_for_row(super_row("MBRIDGE-26.06", "B300", "MXFP8", 1, 8))
    assert blackwell.model.moe_capacity_factor is None
