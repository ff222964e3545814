"""bench/row_era.py: a row's date from its own text, the era thresholds, and the dev eras."""

from __future__ import annotations

import dataclasses

import pytest

from costmodel.execution_presets import DEFAULT_OPTIONS, MEGATRON_2021
from tests.bench.bench_loader import load_bench

era = load_bench("row_era")
rows_mod = load_bench("published_rows")
options_mod = load_bench("row_options")


def _month(date: object) -> tuple[int, int] | None:
    return None if date is None else date.month_key


@pytest.mark.parametrize(
    ("version", "month"),
    [
        ("NeMo 24.03.01.framework container", (2024, 3)),
        ("NeMo 25.04.rc2 container", (2025, 4)),
        ("NeMo Framework 24.07", (2024, 7)),
        ("nvcr.io/nvidia/nemo:24.12", (2024, 12)),
        ("megatron-core==0.7.0", (2024, 5)),
        ("transformer_engine==1.8", (2024, 7)),
        ("container nvcr.io/nvidia/pytorch:22.05-py3", (2022, 5)),
        ("PyTorch 23.10 container", (2023, 10)),
        ("Megatron-Core r0.9.0", (2024, 10)),
        ("Megatron-Core v0.5", (2024, 2)),
        ("built from core_r0.10.0", (2025, 2)),
        ("core_v0.12.1", (2025, 5)),
        ("Megatron-LM v2.5", (2021, 8)),
        ("Megatron-LM v0.11.0", (2025, 3)),
        ("TE 1.4", (2024, 3)),
        ("Transformer Engine v2.0", (2025, 2)),
        ("NeMo 2.0 with no container", None),
        ("an in-house stack", None),
    ],
)
def test_stack_version_forms(version: str, month: tuple[int, int] | None) -> None:
    assert _month(era.stack_date(version)) == month


def test_several_stack_versions_date_by_the_newest() -> None:
    # A stack is no older than its newest component (MCORE-MOE-README's version text).
    date = era.stack_date("Megatron-Core v0.8 (PyTorch 24.09 container, TE 1.11)")
    assert date.month_key == (2024, 10) and date.evidence == "TE 1.11"


def test_versions_outside_the_release_table() -> None:
    newest = max(era.MEGATRON_CORE_RELEASES.values())
    assert era.stack_date("Megatron-Core r0.99.0").month_key == newest
    with pytest.raises(era.NotExpressible, match="no release date"):
        era.stack_date("Megatron-Core r0.2.0")
    with pytest.raises(era.NotExpressible, match=r"Megatron-LM 3\.0 has no release date"):
        era.stack_date("Megatron-LM v3.0")
    with pytest.raises(era.NotExpressible, match="months run 1 to 12"):
        era.stack_date("NeMo 24.13 container")


@pytest.mark.parametrize(
    ("text", "month"),
    [
        ("Doe et al. (arXiv 2205.01068), Sec 2.4", (2022, 5)),
        ("arXiv:2301.00001v2", (2023, 1)),
        ("https://arxiv.org/abs/2310.00001", (2023, 10)),
        ("cites arXiv 2104.04473; reports arXiv 2402.15627", (2024, 2)),
        ("no identifier here", None),
    ],
)
def test_arxiv_forms(text: str, month: tuple[int, int] | None) -> None:
    assert _month(era.arxiv_date(text)) == month


@pytest.mark.parametrize(
    ("text", "month"),
    [
        ("Doe et al. 2022, 'A synthetic paper'", (2022, 12)),
        ("Doe et al. 2022.", (2022, 12)),
        ("A Lab 2021 and 2023 reports", (2023, 12)),
        ("arXiv 2012.12345 only", None),
        ("images/cases_april2021.png, 2024-11, v2.0, 26.06", None),
    ],
)
def test_year_forms(text: str, month: tuple[int, int] | None) -> None:
    assert _month(era.year_date(text)) == month


def test_most_specific_evidence_wins() -> None:
    row = {
        "source": "Doe et al. 2023, 'Synthetic' (arXiv 2305.00001)",
        "source_locator": "arXiv 2305.00001 Table 9",
        "source_version": "container nvcr.io/nvidia/pytorch:20.12-py3",
    }
    assert era.row_date(row).month_key == (2020, 12)
    assert era.row_date(row | {"source_version": ""}).month_key == (2023, 5)
    year_only = {"source": "Doe et al. 2023, 'Synthetic'", "source_locator": "Table 9"}
    assert era.row_date(year_only).month_key == (2023, 12)
    assert era.row_date({"source": "A model card", "source_version": "in-house"}) is None


def _date(year: int, month: int) -> object:
    return era.RowDate(year=year, month=month, evidence="test")


@pytest.mark.parametrize(
    ("month", "expected"),
    [
        ((2022, 12), "megatron_2021"),
        ((2023, 1), "flash_attention_2"),
        ((2024, 9), "flash_attention_2"),
        ((2024, 10), "current"),
    ],
)
def test_era_thresholds(month: tuple[int, int], expected: str) -> None:
    assert era.FLASH_ATTENTION_IN_MEGATRON == (2023, 1)
    assert era.FA3_IN_TRANSFORMER_ENGINE == (2024, 10)
    assert era.era_for(_date(*month)) == expected


def test_undated_row_runs_current_defaults() -> None:
    assert era.era_for(None) == "current"
    assert era.era_options("current", None) is DEFAULT_OPTIONS
    assert era.era_plan_fields("current", None, 4, True) == {
        "overlap_grad_reduce": True,
        "overlap_param_gather": True,
    }


def test_2021_plan_features_follow_their_merges() -> None:
    assert era.era_options("megatron_2021", _date(2022, 4)) is MEGATRON_2021
    may = era.era_options("megatron_2021", _date(2022, 5))
    assert may.plan_features == {"sequence_parallel", "selective_recompute"}
    june = era.era_options("megatron_2021", _date(2022, 6))
    assert june.plan_features == {
        "sequence_parallel",
        "selective_recompute",
        "distributed_optimizer",
    }
    assert june.attention == "materialized" and june.stale_main_grad


def test_2021_gradient_reduction_is_the_sc21_scripts() -> None:
    # torch DDP (overlapped, 25 MiB buckets) without a pipeline, local DDP with one.
    assert era.era_plan_fields("megatron_2021", None, 1, False) == {
        "overlap_grad_reduce": True,
        "ddp_bucket_size": era.TORCH_DDP_BUCKET_PARAMS,
    }
    assert era.era_plan_fields("megatron_2021", None, 2, False) == {"overlap_grad_reduce": False}


@pytest.mark.parametrize(
    ("month", "grad", "param"),
    [((2023, 8), False, False), ((2023, 9), True, False), ((2023, 11), True, True)],
)
def test_overlap_flags_follow_their_merges(month: tuple[int, int], grad: bool, param: bool) -> None:
    fields = era.era_plan_fields("flash_attention_2", _date(*month), 4, True)
    assert fields == {"overlap_grad_reduce": grad, "overlap_param_gather": param}
    options = era.era_options("flash_attention_2", _date(*month))
    assert options.flash_attention_version == 2 and options.attention == "flash"


DEV_SOURCES = [
    # (source_id, source, source_locator, source_version) as published-runs-dev.csv states
    # them (the date-bearing part), and the era each row runs.
    (
        "SC21-T1",
        "Narayanan et al. 2021, (SC21, arXiv 2104.04473), Table 1",
        "arXiv 2104.04473 Table 1",
        "Megatron-LM commit 6985e589 (per sc21/README), container nvcr.io/nvidia/pytorch:20.12-py3",
        "megatron_2021",
    ),
    ("SC21-T2", "Narayanan et al. 2021, (arXiv 2104.04473)", "", "", "megatron_2021"),
    ("MTNLG-2.4", "Smith et al. 2022, (arXiv 2201.11990)", "", "", "megatron_2021"),
    ("BLOOM-176B", "BigScience BLOOM-176B training", "train/tr11-176B-ml", "", "megatron_2021"),
    ("OPT-175B", "Zhang et al. 2022, 'OPT' (arXiv 2205.01068)", "", "", "megatron_2021"),
    ("GPT-NEOX-20B", "Black et al. 2022, (arXiv 2204.06745)", "", "", "megatron_2021"),
    ("NEMOTRON4-15B-T2", "NVIDIA 2024, (arXiv 2402.16819)", "", "", "flash_attention_2"),
    ("NEMOTRON4-340B-T2", "NVIDIA 2024, (arXiv 2406.11704)", "", "", "flash_attention_2"),
    (
        "MLM-README-2024",
        "NVIDIA/Megatron-LM README (Megatron-Core r0.8.0)",
        "",
        "Megatron-Core r0.8.0 (per figure legend)",
        "flash_attention_2",
    ),
    ("NEMO-LONGSEQ", "NeMo docs", "", "NeMo 24.03.01.framework container", "flash_attention_2"),
    ("NEMO-LONGSEQ", "NeMo docs", "", "NeMo 25.04.rc2 container", "current"),
    ("LLAMA3-T4", "Llama Team, Meta 2024, (arXiv 2407.21783)", "", "", "current"),
    ("MEGASCALE-T3", "Jiang et al. 2024, (NSDI'24, arXiv 2402.15627)", "", "", "flash_attention_2"),
    ("DEEPSEEK-V3", "DeepSeek-AI 2024, (arXiv 2412.19437)", "", "", "current"),
    ("MOEZOO-QWEN3-GB200", "yanring/Megatron-MoE-ModelZoo", "readme.md @ e8650517", "", "current"),
    (
        "MCORE-MOE-README",
        "NVIDIA/Megatron-LM moe/README.md",
        "@ 7f22e210cd (2024-11",
        "Megatron-Core v0.8 (PyTorch 24.09 container, TE 1.11)",
        "current",
    ),
    ("MBRIDGE-26.06", "Megatron-Bridge summary", "", "NeMo 26.06 container", "current"),
]


@pytest.mark.parametrize(("source_id", "source", "locator", "version", "expected"), DEV_SOURCES)
def test_dev_source_eras(
    source_id: str, source: str, locator: str, version: str, expected: str
) -> None:
    raw = {
        "source_id": source_id,
        "source": source,
        "source_locator": locator,
        "source_version": version,
    }
    assert options_mod.row_era(raw)[0] == expected


def test_explicit_entries_are_only_the_undatable_sources() -> None:
    assert dict(options_mod.ERA_BY_SOURCE) == {"BLOOM-": "megatron_2021", "LLAMA3-": "current"}


UNKNOWN_2022_A100 = {
    # A synthetic row of an unknown source: a 2022 paper's A100 run, 48 layers, h 8192.
    "row_id": "9001",
    "source_id": "HELDOUT-X",
    "source": "Doe et al. 2022, 'A synthetic training report'",
    "source_locator": "Table 3",
    "source_version": "",
    "trust": "A",
    "model": "GPT 39B",
    "arch_notes": "GPT-2/3-style decoder, GeLU MLP, ffn=4h, learned pos-emb, tied embeddings",
    "num_layers": "48",
    "hidden_size": "8192",
    "num_attention_heads": "64",
    "vocab_size": "51200",
    "seq_length": "2048",
    "gpu_type": "A100-SXM4-80GB",
    "num_gpus": "512",
    "tp": "8",
    "pp": "2",
    "micro_batch_size": "4",
    "global_batch_size": "1536",
    "recompute": "full",
    "precision": "bf16",
}


def test_unknown_2022_a100_row_runs_the_2021_options() -> None:
    # "2022" alone dates the row to 2022-12 (an upper bound): the 2021 code with the
    # sequence parallelism, selective recompute and distributed optimizer merged in 2022.
    case = rows_mod.case_for_row(UNKNOWN_2022_A100)
    features = {"sequence_parallel", "selective_recompute", "distributed_optimizer"}
    assert case.options.plan_features == features
    assert dataclasses.replace(case.options, plan_features=frozenset()) == MEGATRON_2021
    assert options_mod.options_for_row(UNKNOWN_2022_A100) == case.options
    early = UNKNOWN_2022_A100 | {"source_locator": "arXiv 2201.00001 Table 3"}
    assert options_mod.options_for_row(early) is MEGATRON_2021
    # Pipelined: Megatron's local DDP reduces after the pipeline (SC21 scripts).
    assert not case.plan.overlap_grad_reduce and case.plan.ddp_bucket_size is None


def test_unknown_rows_of_later_dates() -> None:
    h100 = UNKNOWN_2022_A100 | {"gpu_type": "H100-SXM5-80GB", "source": "Doe (arXiv 2405.00001)"}
    case = rows_mod.case_for_row(h100)
    assert case.options.flash_attention_version == 2 and case.options.attention == "flash"
    assert case.plan.overlap_grad_reduce
    # A year alone is December of it: a 2024 report may postdate Transformer Engine v1.11.
    year_only = h100 | {"source": "Doe et al. 2024, 'X'"}
    assert rows_mod.case_for_row(year_only).options == DEFAULT_OPTIONS
    undated = h100 | {"source": "A synthetic model card"}
    assert rows_mod.case_for_row(undated).options == DEFAULT_OPTIONS
