"""bench/unstated_vpp.py: the degrees a row admits, its sharding variants and its entry."""

from __future__ import annotations

import json

import pytest

from specs.pipeline_split import pipeline_split
from tests.bench.bench_loader import load_bench
from tests.bench.published_row_cases import LLAMA3_405B_SHAPE

rows_mod = load_bench("published_rows")
figures = load_bench("row_figures")
unstated = load_bench("unstated_vpp")
tables = load_bench("validation_tables")
published_csv = load_bench("published_csv")
bench = load_bench("validate_published")

LLAMA3_ROW = {
    # published-runs-dev.csv row 395 (Llama 3 paper Table 4), the columns the mapping reads.
    "row_id": "395",
    "source_id": "LLAMA3-T4",
    "trust": "A",
    "model": "Llama 3 405B",
    "arch_notes": "paper Table 3: 126 layers, dim 16384, FFN 53248, 128 heads, 8 KV heads, "
    "vocab 128,000 (tokenizer has 128,256 incl. special tokens); SwiGLU",
    **LLAMA3_405B_SHAPE,
    "gpu_type": "H100-SXM5-80GB (700W TDP)",
    "num_gpus": "8192",
    "tp": "8",
    "pp": "16",
    "vpp": "",
    "cp": "1",
    "dp": "64",
    "fsdp_or_zero": "FSDP (optimizer states + grads sharded; params not resharded after forward)",
    "global_batch_size": "2048",
    "recompute": "none ('pre-train Llama 3 on sequences of 8K tokens without activation "
    "checkpointing')",
    "precision": "BF16",
    "tflops_per_gpu": "430",
    "flops_convention": "MFU per Chowdhery et al. (PaLM) definition, peak = H100 dense BF16 "
    "(~989 TFLOP/s; 430/0.43); exact FLOP formula (attention/causal handling) not given",
    "notes": "Pipeline: interleaved schedule with tunable N, first/last stage have one fewer "
    "layer; CP is all-gather based (not ring). NCCLX collectives. MBS not given.",
}

NEMOTRON_ROW = {
    # published-runs-dev.csv row 421 (Nemotron-4 340B report Table 2).
    "row_id": "421",
    "source_id": "NEMOTRON4-340B-T2",
    "trust": "B",
    "model": "Nemotron-4-340B-Base",
    "arch_notes": "squared-ReLU MLP, GQA 8 KV heads, untied embeddings; NeMo Nemotron4Config340B",
    "num_layers": "96",
    "hidden_size": "18432",
    "num_attention_heads": "96",
    "num_query_groups": "8",
    "ffn_hidden_size": "73728",
    "vocab_size": "256000",
    "seq_length": "4096",
    "gpu_type": "H100-SXM5-80GB",
    "num_gpus": "1536",
    "tp": "8",
    "pp": "12",
    "vpp": "interleaved (degree not stated)",
    "dp": "16",
    "fsdp_or_zero": "distributed optimizer",
    "global_batch_size": "768",
    "precision": "BF16 (peak quoted as 989 TFLOP/s bf16)",
    "iteration_time_s": "10.3",
    "derived_tokens_per_sec_per_gpu": "198.8",
    "notes": "MBS, recompute, SP not stated.",
}


def test_llama3_row_admits_vpp_2_4_8_with_one_layer_fewer_on_the_first_and_last_stage():
    assert unstated.admitted_degrees(LLAMA3_ROW) == [2, 4, 8]
    case = rows_mod.case_for_row(unstated.with_vpp(LLAMA3_ROW, 2))
    split = pipeline_split(case.model, case.plan)
    counts = [c.num_layers for c in split.in_forward_order()]
    assert counts == [3] + [4] * 30 + [3]
    # Without the note 126 layers do not split over 16 stages: no degree is admitted.
    bare = LLAMA3_ROW | {"notes": "interleaved schedule"}
    assert unstated.admitted_degrees(bare) == []


def test_nemotron_96_layers_over_pp12_admit_vpp_2_4_8_and_the_microbatch_rule_counts():
    assert unstated.admitted_degrees(NEMOTRON_ROW) == [2, 4, 8]
    # 720 / 16 = 45 microbatches, not a multiple of pp 12: the interleaved schedule refuses.
    assert unstated.admitted_degrees(NEMOTRON_ROW | {"global_batch_size": "720"}) == []


def test_a_row_with_a_stated_vpp_is_not_listed():
    stated = NEMOTRON_ROW | {"vpp": "4"}
    assert rows_mod.vpp_stated(stated)
    assert unstated.unstated_vpp_report([stated]) == []
    assert [e["row_id"] for e in unstated.unstated_vpp_report([NEMOTRON_ROW])] == ["421"]


def test_llama3_notes_set_the_account_for_flags_and_all_gather_context_parallelism():
    case = rows_mod.case_for_row(unstated.with_vpp(LLAMA3_ROW | {"cp": "16", "dp": "4"}, 4))
    assert case.plan.account_for_embedding_in_pipeline_split
    assert case.plan.account_for_loss_in_pipeline_split
    assert case.plan.cp_comm_type == "all_gather"
    assert case.plan.distributed_optimizer and not case.plan.use_megatron_fsdp


def test_llama3_entry_prices_both_shardings_at_every_degree():
    (entry,) = unstated.unstated_vpp_report([LLAMA3_ROW])
    base = rows_mod.case_for_row(unstated.with_vpp(LLAMA3_ROW, 1))
    assert entry["published_s"] == pytest.approx(
        figures.published_iteration_time_s(LLAMA3_ROW, base)
    )
    assert entry["published_from"] == "tflops_per_gpu"
    assert entry["micro_batch_size"] == 1 and not entry["micro_batch_size_stated"]
    results = entry["results"]
    assert [(r["vpp"], r["sharding"]) for r in results] == [
        (v, s) for v in (2, 4, 8) for s in ("distributed optimizer", "Megatron-FSDP optim_grads")
    ]
    for r in results:
        assert r["error"] == pytest.approx(r["predicted_s"] / entry["published_s"] - 1)
        assert r["fits"] == (r["peak_memory_gib"] <= entry["device_memory_gib"])
    errors = [r["error"] for r in results]
    assert entry["min_error"] == min(errors) and entry["max_error"] == max(errors)
    assert entry["any_fits"] == any(r["fits"] for r in results)
    by_vpp = {}
    for r in results:
        by_vpp.setdefault(r["vpp"], {})[r["sharding"]] = r
    for pair in by_vpp.values():
        # Sharded gradients hold less than the distributed optimizer's whole buffer.
        fsdp, distopt = pair["Megatron-FSDP optim_grads"], pair["distributed optimizer"]
        assert fsdp["peak_memory_gib"] < distopt["peak_memory_gib"]
    assert set(entry["by_sharding"]) == {"distributed optimizer", "Megatron-FSDP optim_grads"}


def test_a_row_with_another_gap_is_listed_with_its_reason_and_no_results():
    other = NEMOTRON_ROW | {"gpu_type": "H100 PCIe"}
    (entry,) = unstated.unstated_vpp_report([other])
    assert entry["not_priced"] == (
        "gpu_type 'H100 (H100 PCIe)': no stored profile for PCIe and NVL cards, which run "
        "below the SXM profiles' power and clocks, without NVSwitch; an SXM part is priced"
    )
    assert entry["results"] == []


def test_validation_json_carries_the_unstated_vpp_entries(capsys):
    if published_csv.default_csv() is None:
        pytest.skip("published-runs-dev.csv not present")
    assert bench.main(["--no-fit", "--json", "--rows", "NEMOTRON4-340B"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["rows"] == []
    entries = result["unstated_vpp"]
    assert [e["row_id"] for e in entries] == ["421", "422", "423"]
    for e in entries:
        assert {"degrees", "results", "min_error", "max_error", "any_fits"} <= set(e)
        assert e["degrees"] == [2, 4, 8]


def test_markdown_section_gives_each_sharding_its_band_and_names_unpriced_rows():
    result = {"vpp": 2, "plan": "tp8 pp12 vpp2 dp16 mbs1 sp distopt", "sharding": "distopt"}
    entry = {
        "row_id": "1",
        "model": "M",
        "plan": "tp8 pp12 dp16 mbs1 sp distopt",
        "published_s": 10.0,
        "micro_batch_size_stated": False,
        "device_memory_gib": 80.0,
        "results": [
            result | {"predicted_s": 9.0, "error": -0.1, "peak_memory_gib": 70.4},
            result | {"vpp": 4, "predicted_s": 11.0, "error": 0.1, "peak_memory_gib": 90.0},
        ],
        "by_sharding": {"distopt": {"min_error": -0.1, "max_error": 0.1, "any_fits": True}},
    }
    lines = tables.unstated_vpp_lines([entry, {"row_id": "2", "model": "N", "not_priced": "why"}])
    assert (
        "| 1 | M | tp8 pp12 dp16 mbs1 sp distopt (mbs not stated) | 10.00 | distopt | "
        "2: 9.00 (-10.0%), 70; 4: 11.00 (+10.0%), 90 | -10.0% to +10.0% | yes |"
    ) in lines
    assert "| 2 | N | | | | not priced: why | | |" in lines
