"""bench/trust_c_rows.py and its page section (`validation_tables.trust_c_lines`): trust C
rows are priced apart where their columns allow, else listed with the reason, and the
trusted rows are left to the figures."""

from __future__ import annotations

from tests.bench.bench_loader import load_bench
from tests.bench.published_row_cases import LLAMA2_LONGSEQ, MLM_README_32B, row_with

trust_c = load_bench("trust_c_rows")
tables = load_bench("validation_tables")

PRICED = row_with(LLAMA2_LONGSEQ, trust="C", row_id="9001", tokens_per_sec_per_gpu="3000")
REASON = (
    "model 'Nemotron_H_4B' has hybrid Mamba layers and no preset: priced are Nemotron 3 Nano, "
    "Nemotron 3 Super and Nemotron-H (`hybrid_recipes.hybrid_preset`)"
)
HYBRID = [  # a Nemotron-H size without a preset (bench/hybrid_recipes.py)
    row_with(MLM_README_32B, trust="C", row_id=str(i), model="Nemotron_H_4B", hidden_size="")
    for i in (9002, 9003)
]


def test_trust_c_rows_are_priced_or_given_their_reason_and_trusted_rows_skipped():
    trusted = row_with(LLAMA2_LONGSEQ, tokens_per_sec_per_gpu="3000")
    entries = trust_c.trust_c_report([trusted, PRICED, *HYBRID])
    assert [e["row_id"] for e in entries] == ["9001", "9002", "9003"]
    priced = entries[0]
    assert priced["priced"] and priced["trust"] == "C"
    # 1024 x 4096 tokens over 4 GPUs at 3000 tokens/s per GPU.
    assert abs(priced["published_s"] - 1024 * 4096 / (3000 * 4)) < 1e-9
    assert abs(priced["error"] - (priced["predicted_s"] / priced["published_s"] - 1)) < 1e-12
    assert [e["reason"] for e in entries[1:]] == [REASON] * 2


def test_the_section_lists_priced_rows_and_groups_the_others_by_model_and_reason():
    lines = tables.trust_c_lines(trust_c.trust_c_report([PRICED, *HYBRID]))
    assert lines[0] == "## Trust C rows (in no figure)"
    priced = [line for line in lines if line.startswith("| 9001 |")]
    assert len(priced) == 1 and "tp1 pp1" in priced[0]
    grouped = [line for line in lines if REASON in line]
    assert grouped == [f"| 9002, 9003 | MLM-README-2024 | Nemotron_H_4B | {REASON} |"]
