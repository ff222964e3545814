"""bench/published_rows.py, row_model.py, row_columns.py and norm_recipes.py: how the free
text of a row's columns is read, and that a text they do not understand sets the row apart
with the column and the text instead of pricing it as something else."""

from __future__ import annotations

import pytest

from tests.bench.bench_loader import load_bench
from tests.bench.published_row_cases import LLAMA2_LONGSEQ, MLM_README_32B, row_with
from tests.bench.validation_cases import dev_rows

rows_mod = load_bench("published_rows")
figures = load_bench("row_figures")


@pytest.mark.parametrize(
    ("text", "precision"),
    [
        ("BF16", "bf16"),
        ("fp16 mixed (--fp16, static loss-scale 8192)", "bf16"),
        ("mixed (fp16 per repo scripts)", "bf16"),
        ("", "bf16"),
        ("not stated (MFU consistent with bf16 dense peak 989 TFLOP/s)", "bf16"),
        ("MXFP8", "fp8"),
        ("FP8-CS", "fp8"),
        ("FP8 (delayed scaling)", "fp8"),
        ("NVFP4", "nvfp4"),
    ],
)
def test_precision_texts(text, precision):
    assert rows_mod.precision_for(text) == precision


@pytest.mark.parametrize("text", ["TF32", "FP32", "INT8", "MXFP4"])
def test_a_precision_without_a_gemm_curve_is_refused_by_name(text):
    with pytest.raises(rows_mod.NotExpressible, match=text):
        rows_mod.precision_for(text)


@pytest.mark.parametrize(
    ("text", "recompute"),
    [
        ("", "none"),
        ("not stated", "none"),
        ("none ('without activation checkpointing')", "none"),
        ("full (checkpoint-activations, 1 layer)", "full"),
        ("activation checkpointing of every layer", "full"),
        ("selective", "selective"),
    ],
)
def test_recompute_texts(text, recompute):
    plan = rows_mod.case_for_row(row_with(MLM_README_32B, recompute=text)).plan
    assert plan.recompute == recompute


@pytest.mark.parametrize(
    ("column", "text"),
    [
        ("recompute", "yes"),
        ("fsdp_or_zero", "ZeRO-2"),
        ("fsdp_or_zero", "HSDP over 8 nodes"),
        ("sequence_parallel", "partial"),
    ],
)
def test_a_text_not_understood_sets_the_row_apart_with_column_and_text(column, text):
    with pytest.raises(rows_mod.NotExpressible) as err:
        rows_mod.case_for_row(row_with(MLM_README_32B, **{column: text}))
    assert text.lower() in str(err.value).lower()


def test_a_task_other_than_pretraining_sft_or_lora_is_refused():
    task = load_bench("norm_recipes").train_task
    assert task({"task": "pretrain (benchmark)"}) == "pretrain" and task({}) == "pretrain"
    assert task({"task": "continued pre-training"}) == "pretrain"
    assert task({"task": "SFT (fine-tune)"}) == "sft"
    with pytest.raises(rows_mod.NotExpressible, match="dpo"):
        task({"task": "DPO"})


@pytest.mark.parametrize(
    ("text", "sharded"),
    [
        ("none (plain DP; DDP impl=local)", False),
        ("no FSDP", False),
        ("DDP + distributed optimizer (FSDP=0)", True),
        ("ZeRO-1 (DeepSpeed BF16_Optimizer)", True),
        ("ZeRO stage 1", True),
        ("FSDP (optimizer states + grads sharded; params not resharded after forward)", True),
    ],
)
def test_sharding_texts(text, sharded):
    plan = rows_mod.case_for_row(row_with(MLM_README_32B, fsdp_or_zero=text)).plan
    assert plan.distributed_optimizer is sharded


@pytest.mark.parametrize("text", ["not stated", "n/a", "unknown"])
def test_a_column_that_states_nothing_reads_as_an_empty_cell(text):
    for column in ("precision", "recompute", "fsdp_or_zero", "sequence_parallel"):
        empty = rows_mod.case_for_row(row_with(MLM_README_32B, **{column: ""}))
        case = rows_mod.case_for_row(row_with(MLM_README_32B, **{column: text}))
        assert case.plan == empty.plan and case.job == empty.job


def test_sequence_parallel_follows_tp_unless_the_row_says_no():
    assert rows_mod.case_for_row(
        row_with(MLM_README_32B, sequence_parallel="yes")
    ).plan.sequence_parallel
    no = rows_mod.case_for_row(row_with(MLM_README_32B, sequence_parallel="no (did not exist)"))
    assert not no.plan.sequence_parallel


def test_the_model_family_names_the_mlp_where_the_notes_do_not():
    llama = row_with(MLM_README_32B, model="Llama 2 34B", arch_notes="", ffn_hidden_size="19200")
    assert rows_mod.case_for_row(llama).model.activation == "swiglu"
    assert rows_mod.case_for_row(row_with(MLM_README_32B, arch_notes="")).model.activation == "gelu"
    with pytest.raises(rows_mod.NotExpressible, match="activation not stated"):
        rows_mod.case_for_row(row_with(MLM_README_32B, model="Falcon 40B", arch_notes=""))
    with pytest.raises(rows_mod.NotExpressible, match="hybrid Mamba"):
        rows_mod.case_for_row(row_with(MLM_README_32B, model="Nemotron-H 4B", hidden_size=""))
    parallel = row_with(MLM_README_32B, arch_notes="GeLU, parallel residual")
    assert rows_mod.case_for_row(parallel).model.layer_block == "parallel"
    with pytest.raises(rows_mod.NotExpressible, match="parallel transformer block"):
        rows_mod.case_for_row(row_with(MLM_README_32B, arch_notes="parallel transformer block"))


@pytest.mark.parametrize("text", ["abc", "-5", "0"])
def test_a_published_figure_that_is_not_a_positive_number_is_named(text):
    raw = row_with(LLAMA2_LONGSEQ, tokens_per_sec_per_gpu=text)
    case = rows_mod.case_for_row(raw)
    with pytest.raises(rows_mod.NotExpressible, match="tokens_per_sec_per_gpu"):
        figures.published_iteration_time_s(raw, case)


def test_a_release_before_the_norm_rules_is_set_apart_not_raised():
    early = [r | {"source_id": "MBRIDGE-25.07", "row_id": "9175"} for r in dev_rows("175")]
    outcomes, _, apart = load_bench("row_pricing").evaluate(early)
    assert not outcomes
    assert apart[0]["row_id"] == "9175" and "predates" in apart[0]["reason"]


def test_a_printed_dp_unlike_the_gpu_count_sets_the_row_apart_unless_the_notes_settle_it():
    # 384 GPUs / tp 8 = 48.
    assert rows_mod.case_for_row(row_with(MLM_README_32B, dp="48")).plan.dp == 48
    with pytest.raises(rows_mod.NotExpressible, match="dp 24 printed"):
        rows_mod.case_for_row(row_with(MLM_README_32B, dp="24"))
    settled = row_with(MLM_README_32B, dp="24", notes="Treat DP=48 as the intended value.")
    assert rows_mod.case_for_row(settled).plan.dp == 48


def test_the_moe_readme_convention_is_megatrons_count_before_the_causal_factor():
    text = (
        "Megatron-LM num_floating_point_operations (v0.8: full non-causal attention, top-k experts)"
    )
    assert figures.flops_formula(text) is figures.noncausal_flops_per_iteration
    assert figures.flops_formula("not stated on page") is None
