"""bench/nemo_recipes.py, nemo_options.py and nemo_keys.py: NeMo 2.0 performance-recipe
rules, keyed on what a row states (NVIDIA/NeMo scripts/performance at v2.2.0 to v2.5.0rc0)."""

from __future__ import annotations

import pytest

from tests.bench.bench_loader import load_bench
from tests.bench.published_row_cases import LLAMA3_70B_SHAPE

rules = load_bench("nemo_recipes")
keys = load_bench("nemo_keys")
options_rules = load_bench("nemo_options")
rows = load_bench("published_rows")


def _row(**columns: str) -> dict[str, str]:
    """A NeMo 2.0 Llama 3 70B H100 row (tp4 pp8 vpp5 on 64 GPUs) with ``columns`` replaced."""
    base = {
        "row_id": "t",
        "source_id": "NEMO-PERF-25.07",
        "source_version": "NeMo 25.07 container",
        "trust": "B",
        "task": "pretrain",
        "model": "Llama3 70B",
        "arch_notes": "SwiGLU, GQA",
        **LLAMA3_70B_SHAPE,
        "gpu_type": "H100-SXM5-80GB",
        "num_gpus": "64",
        "tp": "4",
        "pp": "8",
        "vpp": "5",
        "cp": "1",
        "micro_batch_size": "1",
        "global_batch_size": "128",
        "precision": "BF16",
        "fsdp_or_zero": "",
        "recompute": "",
    }
    return base | columns


@pytest.mark.parametrize(
    ("source_id", "version", "release"),
    [
        ("NEMO-PERF-25.04", "NeMo 25.04 container", "25.04"),
        ("X", "NeMo 25.09.01 container", "25.09"),
        ("X", "NeMo 25.04.rc2 container", "25.04"),
        ("X", "NeMo 25.07", "25.07"),
        ("X", "NeMo Framework 25.07", "25.07"),
        ("NEMO-LONGSEQ", "NeMo 24.03.01.framework container", None),
        ("NEMO-PERF-24.12", "NeMo 24.12 container", None),
        ("MBRIDGE-25.11", "NeMo 25.11 container", None),
        ("X", "Megatron-Core r0.8.0", None),
    ],
)
def test_release_is_parsed_from_the_version_and_not_for_megatron_bridge(
    source_id, version, release
):
    assert keys.nemo_release({"source_id": source_id, "source_version": version}) == release


def test_rows_outside_nemo_2_get_no_fields():
    raw = _row(source_version="NeMo 24.03.01.framework container")
    assert options_rules.nemo_option_fields(raw, True) == {}
    assert rules.nemo_model_fields(raw) == {}


@pytest.mark.parametrize(
    ("release", "precision", "model", "grad_bytes"),
    [
        ("25.07", "BF16", "DeepSeek V3", 2),  # helpers.py: every run
        ("25.04", "FP8", "DeepSeek V3", 2),  # FP8 branch
        ("25.04", "BF16", "DeepSeek V3", 4),  # bf16_mixed keeps fp32
        ("25.04", "BF16", "Llama3 70B", 2),  # performance mode
        ("25.02", "BF16", "Mixtral 8x22B", 2),  # recipes/mixtral_8x22b.py
        ("25.04", "BF16", "Mixtral 8x22B", 4),  # recipes/mixtral_8x22b_64k.py
    ],
)
def test_gradient_reduction_bytes_per_release(release, precision, model, grad_bytes):
    raw = _row(source_version=f"NeMo {release} container", precision=precision, model=model)
    assert options_rules.main_grad_bytes(raw, release) == grad_bytes


def test_fp8_recipe_follows_the_printed_precision():
    for text, recipe in (("FP8", "delayed"), ("FP8-CS", "tensorwise"), ("MXFP8", "mxfp8")):
        fields = options_rules.fp8_fields(_row(precision=text), "25.07", False)
        assert fields == {"fp8_recipe": recipe, "fp8_param": True}
    assert options_rules.fp8_fields(_row(precision="FP8"), "25.04", True)["fp8_param"] is False
    assert options_rules.fp8_fields(_row(precision="BF16"), "25.07", False) == {}
    with pytest.raises(options_rules.NotExpressible, match="blockwise"):
        options_rules.fp8_fields(_row(precision="FP8-SS"), "25.07", False)


def test_llama3_70b_row_runs_the_recipe_through_the_published_row_path():
    case = rows.case_for_row(_row(precision="FP8"))
    assert case.plan.tp_comm_overlap and case.plan.distributed_optimizer
    options = case.options
    assert options.main_grad_bytes == 2 and options.cross_entropy_fusion == "te"
    assert options.fp8_recipe == "delayed" and options.fp8_param
    assert not options.grad_nan_check
    assert options.tp_overlap_rs_method == "ring_exchange"
    assert options.tp_overlap_bulk_sm_margin is False


def test_25_02_leaves_native_cross_entropy_and_pipeline_reduce_scatter():
    case = rows.case_for_row(_row(source_version="NeMo 25.02 container", precision="FP8"))
    assert case.options.cross_entropy_fusion == "native"
    assert case.options.tp_overlap_rs_method == "pipeline"
    assert case.options.grad_nan_check  # the check is turned off from 25.07


def test_bf16_rows_from_25_07_run_the_precision_aware_optimizer():
    assert rows.case_for_row(_row()).options.precision_aware_optimizer
    earlier = _row(source_version="NeMo 25.04 container")
    assert not rows.case_for_row(earlier).options.precision_aware_optimizer


def test_fsdp_column_turns_on_megatron_fsdp_without_gradient_fusion():
    raw = _row(model="Llama3 8B", tp="1", pp="1", vpp="", num_gpus="8", fsdp_or_zero="FSDP=1")
    raw |= {"num_layers": "32", "hidden_size": "4096", "num_attention_heads": "32"}
    raw |= {"ffn_hidden_size": "14336"}
    case = rows.case_for_row(raw)
    assert case.plan.use_megatron_fsdp and not case.plan.distributed_optimizer
    assert case.plan.data_parallel_sharding_strategy == "optim_grads_params"
    assert not case.options.grad_accumulation_fusion
    assert not keys.fsdp_stated({"fsdp_or_zero": "DDP + distributed optimizer (FSDP=0)"})
    assert keys.fsdp_stated({"fsdp_or_zero": "Megatron FSDP"})
    assert keys.fsdp_stated({"fsdp_or_zero": "1"})
    assert not keys.fsdp_stated({"fsdp_or_zero": "0"})


def test_fsdp_turns_tp_overlap_off_in_25_04_only():
    fsdp = _row(fsdp_or_zero="Megatron-FSDP")
    assert rows.case_for_row(fsdp).plan.tp_comm_overlap
    early = fsdp | {"source_version": "NeMo 25.04 container"}
    assert not rows.case_for_row(early).plan.tp_comm_overlap


def test_405b_counts_embedding_and_loss_from_25_04_only():
    raw = _row(model="Llama3.1 405B", num_layers="126", pp="8", vpp="8", num_gpus="1024")
    raw |= {"hidden_size": "16384", "num_attention_heads": "128", "ffn_hidden_size": "53248"}
    raw |= {"tp": "8", "cp": "2"}
    plan = rows.case_for_row(raw).plan
    assert plan.account_for_embedding_in_pipeline_split and plan.account_for_loss_in_pipeline_split
    old = raw | {"source_version": "NeMo 25.02 container", "pp": "9", "vpp": "7"}
    old |= {"num_gpus": "576"}
    assert not rows.case_for_row(old).plan.account_for_embedding_in_pipeline_split


def test_deepseek_pipeline_split_per_release():
    assert rules.deepseek_pipeline_fields("25.04", 16, 1, 61, 1) == {
        "decoder_first_pipeline_num_layers": 3,
        "decoder_last_pipeline_num_layers": 2,
    }
    layout = rules.deepseek_pipeline_fields("25.07", 16, 1, 61, 1)["pipeline_model_parallel_layout"]
    stages = layout.split("|")
    assert len(stages) == 16 and stages[0] == "Etttt" and stages[-1] == "tmL"
    assert sum(s.count("t") for s in stages) == 61


def test_recompute_modules_read_from_the_column_and_checked():
    assert rules.recompute_modules_stated({"recompute": "selective (mla_up_proj, mlp)"}) == (
        "mla_up_proj",
        "mlp",
    )
    assert rules.recompute_modules_stated({"recompute": "full"}) is None
    assert rules.recompute_modules_stated({"recompute": "full (uniform, 1 layer)"}) is None
    with pytest.raises(rules.NotExpressible, match="warp_drive"):
        rules.recompute_modules_stated({"recompute": "selective (warp_drive)"})


def test_token_drop_and_one_mtp_layer_for_moe_recipes():
    qwen = _row(model="Qwen3 235B-A22B")
    assert rules.nemo_model_fields(qwen) == {"moe_capacity_factor": 1.0}
    early_qwen = qwen | {"source_version": "NeMo 25.04 container"}
    assert rules.nemo_model_fields(early_qwen) == {}
    deepseek = _row(model="DeepSeek V3")
    assert rules.nemo_model_fields(deepseek) == {"mtp_num_layers": 1}  # H100: DeepEP, dropless
    early = deepseek | {"source_version": "NeMo 25.04 container"}
    assert rules.nemo_model_fields(early) == {"mtp_num_layers": 1, "moe_capacity_factor": 1.0}
    b200 = _row(model="DeepSeek V3 (w/o MTP)", gpu_type="B200")
    assert rules.nemo_model_fields(b200) == {"mtp_num_layers": 0, "moe_capacity_factor": 1.0}


def test_distributed_optimizer_whatever_the_source_id():
    raw = _row(source_id="SOME-TABLE", fsdp_or_zero="")
    assert rows.case_for_row(raw).plan.distributed_optimizer
