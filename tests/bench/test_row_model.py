"""bench/row_model.py: the model of a published row, GPT-OSS's attention, norm and
embeddings and the query-key norms of Qwen3; rows from `tests.bench.published_row_cases`."""

from __future__ import annotations

import pytest

from tests.bench.bench_loader import load_bench
from tests.bench.published_row_cases import GPT_OSS_B300, LLAMA405_GB200

rows_mod = load_bench("published_rows")
model_mod = load_bench("row_model")


def test_gpt_oss_row_has_its_window_sinks_and_biases():
    model = rows_mod.case_for_row(GPT_OSS_B300).model
    assert model.sliding_window == 128 and model.sliding_window_every == 2
    assert model.attention_sinks and model.add_bias_linear
    # even layers windowed, odd layers full (openai/gpt-oss-120b layer_types)
    assert model.window_layer_mask()[:4] == (True, False, True, False)


def test_gpt_oss_row_is_gated_rmsnorm_rope_and_untied():
    # Megatron-Bridge GPTOSSProvider: gated_linear_unit, RMSNorm, yarn rotary positions,
    # share_embeddings_and_output_weights False; the notes name none of them.
    model = rows_mod.case_for_row(GPT_OSS_B300).model
    assert model.activation == "swiglu"
    assert model.normalization == "rmsnorm" and model.position_embedding == "rope"
    assert not model.tied_embeddings


@pytest.mark.parametrize(
    ("model", "expected"), [("Qwen3_30B_a3B", True), ("Qwen3-235B-A22B", True)]
)
def test_qwen3_rows_normalize_query_and_key(model: str, expected: bool) -> None:
    assert model_mod.uses_qk_layernorm({"model": model}) is expected


def test_other_rows_have_no_query_key_norms() -> None:
    assert not rows_mod.case_for_row(LLAMA405_GB200).model.qk_layernorm
    assert not rows_mod.case_for_row(GPT_OSS_B300).model.qk_layernorm
