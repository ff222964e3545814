"""bench/row_spellings.py: each accepted spelling reads as the development set's, every
development-set cell is a fixed point, and a row spelled by another transcriber is priced
as the row it means (`published_case`)."""

from __future__ import annotations

import pytest

from specs.errors import SpecError
from tests.bench.bench_loader import load_bench
from tests.bench.row_variants import SAME_MEANING
from tests.bench.validation_cases import dev_set

spellings = load_bench("row_spellings")
figures = load_bench("row_figures")
rows_mod = load_bench("published_rows")


@pytest.mark.parametrize(
    ("column", "text", "accepted"),
    [
        ("gpu_type", "NVIDIA H100 80GB HBM3", "H100 (NVIDIA H100 80GB HBM3)"),
        ("gpu_type", "H100 SXM", "H100 (H100 SXM)"),
        ("gpu_type", "DGX B200", "B200 (DGX B200)"),
        ("gpu_type", "GB200 NVL72", "GB200 (GB200 NVL72)"),
        ("gpu_type", "A100 40GB", "A100 (A100 40GB)"),
        ("gpu_type", "H100-SXM5-80GB", "H100-SXM5-80GB"),
        ("gpu_type", "GB300 (NVL72)", "GB300 (NVL72)"),
        ("gpu_type", "L40S", "L40S"),
        ("precision", "bfloat16", "BF16"),
        ("precision", "float16", "FP16"),
        ("precision", "half", "FP16"),
        ("precision", "MX-FP8", "MXFP8"),
        ("precision", "FP8 (MXFP8)", "MXFP8"),
        ("precision", "fp8_mx", "MXFP8"),
        ("precision", "FP8 current scaling", "FP8-CS"),
        ("precision", "fp8_cs", "FP8-CS"),
        ("precision", "FP8 (delayed scaling)", "FP8 (delayed scaling)"),
        ("precision", "FP8-MX", "FP8-MX"),
        ("precision", "FP8 mixed (fine-grained 1x128)", "FP8 mixed (fine-grained 1x128)"),
        ("recompute", "yes", "yes"),
        ("recompute", "uniform 1 layer", "full"),
        ("recompute", "block 2 layers", "block 2 layers"),
        ("recompute", "-", ""),
        ("sequence_parallel", "✓", "yes"),
        ("sequence_parallel", "✗", "no"),
        ("sequence_parallel", "Y", "yes"),
        ("sequence_parallel", "—", ""),
        ("vpp", "none", "1"),
        ("vpp", "no", "1"),
        ("vpp", "yes", "interleaved"),
        ("vpp", "-", ""),
        ("vpp", "n/a", "n/a"),
        ("fsdp_or_zero", "Megatron FSDP", "Megatron-FSDP"),
        ("fsdp_or_zero", "mcore_fsdp", "Megatron-FSDP"),
        ("fsdp_or_zero", "--use-distributed-optimizer", "distributed optimizer"),
        ("fsdp_or_zero", "dist. opt.", "distributed optimizer"),
        ("fsdp_or_zero", "-", ""),
        ("seq_length", "8K", "8192"),
        ("seq_length", "4k tokens", "4096"),
        ("seq_length", "4,096", "4096"),
        ("global_batch_size", "1,024", "1024"),
        ("global_batch_size", "512 sequences", "512"),
        ("global_batch_size", "2K", "2K"),
        ("global_batch_size", "2M tokens (~1024 seqs)", "2M tokens (~1024 seqs)"),
        ("num_gpus", "1,024 GPUs", "1024"),
        ("iteration_time_s", "2.5 s", "2.5"),
        ("tokens_per_sec_per_gpu", "1,234.5 tokens/s", "1234.5"),
        ("mfu_pct", "45%", "45"),
        ("tflops_per_gpu", "400 TFLOP/s", "400"),
        ("aggregate_pflops", "12.3 PFLOP/s", "12.3"),
        ("tokens_per_sec_per_gpu", "~1200", "~1200"),
        ("trust", "b", "B"),
        ("trust", "A (primary)", "A"),
        ("trust", "high", "high"),
    ],
)
def test_each_spelling_reads_as_the_accepted_one(column, text, accepted):
    assert spellings.cell_text(column, text) == accepted
    assert spellings.cell_text(column, accepted) == accepted


def test_a_row_read_from_a_ragged_line_has_empty_cells_and_no_surplus():
    raw = {"\ufeffrow_id": "1", "model": None, None: ["x"]}
    assert spellings.normalised_row(raw) == {"row_id": "1", "model": ""}


def test_every_development_set_cell_is_a_fixed_point():
    for raw in dev_set():
        assert spellings.normalised_row(raw) == raw, raw["row_id"]


def _outcome(raw: dict[str, str]) -> object:
    """The row's case and published seconds, or the reason it is set apart."""
    try:
        return figures.published_case(raw)
    except (rows_mod.NotExpressible, SpecError) as err:
        return str(err)


SAME_MEANING_CASES = [
    (column, text, accepted)
    for column, pairs in SAME_MEANING.items()
    if column != "trust"
    for text, accepted in pairs
]


@pytest.mark.parametrize(("column", "text", "accepted"), SAME_MEANING_CASES)
def test_a_spelling_of_the_same_setting_prices_every_row_alike(column, text, accepted):
    # Every 9th row of the development set: each source and GPU type is among them.
    for raw in dev_set()[::9]:
        variant = _outcome(raw | {column: text})
        assert variant == _outcome(raw | {column: accepted}), (raw["row_id"], column, text)


@pytest.mark.parametrize(
    ("column", "text"),
    [
        ("gpu_type", "L40S"),
        ("gpu_type", "H20"),
        ("gpu_type", "H100 PCIe"),
        ("precision", "TF32"),
        ("precision", "MXFP4"),
        ("recompute", "block 2 layers"),
        ("recompute", "yes"),
        ("sequence_parallel", "maybe"),
        ("fsdp_or_zero", "ZeRO-2"),
        ("fsdp_or_zero", "sharded"),
        ("seq_length", "about 4096"),
        ("global_batch_size", "2M tokens"),
        ("vpp", "auto"),
        ("micro_batch_size", "auto"),
        ("tokens_per_sec_per_gpu", "~1200"),
    ],
)
def test_a_text_no_reader_takes_is_refused_with_its_column_and_text(column, text):
    # Row 40 (MLM-README-2024, H100, tokens/s and TFLOP/s printed) is priced as written.
    raw = next(r for r in dev_set() if r["row_id"] == "40")
    assert not isinstance(_outcome(raw), str)
    reason = _outcome(raw | {column: text})
    assert isinstance(reason, str)
    assert column in reason, reason
    assert text in reason, reason
