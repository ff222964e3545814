"""Rows of ``published-runs-dev.csv`` and a synthetic priced row shared by the tests of
bench/validate_published.py and its modules (`validation_stats`, `validation_fit`,
`validation_report`, `search_sanity`, `sanity_problems`)."""

from __future__ import annotations

import csv
import dataclasses
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.bench.bench_loader import load_bench

stats: ModuleType = load_bench("validation_stats")


SC21_ROW = {
    # published-runs-dev.csv row 5 (SC21 Table 1, GPT 39.1B), the columns the mapping reads.
    "row_id": "5",
    "source_id": "SC21-T1",
    "source": "Narayanan et al. 2021, (SC21, arXiv 2104.04473), Table 1",
    "source_version": "Megatron-LM commit 6985e589, container nvcr.io/nvidia/pytorch:20.12-py3",
    "trust": "A",
    "model": "GPT 39.1B",
    "arch_notes": "GPT-2/3-style decoder, GeLU MLP, ffn=4h, learned pos-emb, tied embeddings",
    "num_layers": "48",
    "hidden_size": "8192",
    "num_attention_heads": "64",
    "num_query_groups": "64",
    "ffn_hidden_size": "32768",
    "vocab_size": "51200",
    "seq_length": "2048",
    "gpu_type": "A100-SXM4-80GB",
    "num_gpus": "512",
    "tp": "8",
    "pp": "2",
    "vpp": "1",
    "cp": "1",
    "dp": "32",
    "fsdp_or_zero": "none (plain DP; DDP impl=local)",
    "micro_batch_size": "4",
    "global_batch_size": "1536",
    "recompute": "full, every layer (--activations-checkpoint-method uniform)",
    "sequence_parallel": "no (did not exist)",
    "precision": "fp16 mixed (--fp16, static loss-scale 8192)",
    "tflops_per_gpu": "138",
    "flops_convention": "Eq.3: F = 96*B*s*l*h^2*(1 + s/(6h) + V/(16*l*h)) per iteration",
    "iteration_time_s": "",
    "tokens_per_sec_per_gpu": "",
    "derived_tokens_per_sec_per_gpu": "425.1",
}


ROW_1 = SC21_ROW | {
    # published-runs-dev.csv row 1 (SC21 Table 1, GPT 1.7B on 32 GPUs, torch DDP)
    "row_id": "1",
    "model": "GPT 1.7B",
    "num_layers": "24",
    "hidden_size": "2304",
    "num_attention_heads": "24",
    "num_query_groups": "24",
    "ffn_hidden_size": "9216",
    "num_gpus": "32",
    "tp": "1",
    "pp": "1",
    "fsdp_or_zero": "none (plain DP; DDP impl=torch)",
    "micro_batch_size": "16",
    "global_batch_size": "512",
}


def synthetic_outcome(
    row_id: str,
    source: str,
    published: float,
    predicted: float,
    generation: str = "H100/H800",
    model: str = "m",
    gpus: int = 8,
    plan: str | None = None,
    gbs: int | None = None,
    precision_text: str = "",
) -> Any:
    """An `Outcome` of row ``row_id``: bf16 dense, on H100, 4096-token sequences, 10 of 80 GiB
    at its peak, fitting; ``published`` and ``predicted`` iteration seconds."""
    return stats.Outcome(
        row_id=row_id,
        source_id=source,
        model=model,
        plan=f"plan {row_id}" if plan is None else plan,
        generation=generation,
        precision="bf16",
        kind="dense",
        gpu_type="H100",
        num_gpus=gpus,
        seq_length=4096,
        published_s=published,
        predicted_s=predicted,
        peak_memory_gib=10.0,
        device_memory_gib=80.0,
        fits=True,
        global_batch_size=gbs,
        precision_text=precision_text,
    )


FactorShapes = dict[str, tuple[float, float]]
"""Row id -> (c, w): a synthetic row's predicted seconds c + w / f at GEMM rate factor f."""


def factor_seconds(shapes: FactorShapes, row_id: str, factor: float | None) -> float:
    """c + w / f of row ``row_id`` in ``shapes``; f is 1 where ``factor`` is None."""
    c, w = shapes[row_id]
    return c + w / (1.0 if factor is None else factor)


def factor_predictor(shapes: FactorShapes) -> Callable[..., float]:
    """A `validation_fit.Predict` whose seconds move with the low-precision factor alone
    (`factor_seconds`); ``shapes`` is read at each call."""

    def predict(row_id, factor, host_s, sustained, token_s, expert_s=None):
        return factor_seconds(shapes, row_id, factor)

    return predict


def factor_row(
    shapes: FactorShapes, row_id: str, source: str, published_factor: float, **fields: Any
) -> Any:
    """A dense Blackwell `synthetic_outcome` of row ``row_id``: predicted at factor 1,
    published at ``published_factor`` (`factor_seconds`), with ``fields`` replaced."""
    published = factor_seconds(shapes, row_id, published_factor)
    row = synthetic_outcome(row_id, source, published, factor_seconds(shapes, row_id, None))
    return dataclasses.replace(row, generation="Blackwell", **fields)


def dev_set() -> list[dict[str, str]]:
    """Every row of the dev set, as the CSV holds it; the test is skipped where it is not
    readable."""
    published_csv = load_bench("published_csv")
    path = published_csv.default_csv()
    if path is None:
        pytest.skip(f"{published_csv.CSV_NAME} not found")
    return published_csv.read_rows(path)


def dev_rows(ids: str) -> list[dict[str, str]]:
    """The dev set's rows named in ``ids`` (comma-separated row ids, `published_csv.rows_by_ids`),
    in that order; the test is skipped where the dev set is not readable or lacks one."""
    rows, error = load_bench("published_csv").rows_by_ids(ids)
    if error is not None:
        pytest.skip(error)
    return rows


def one_row_csv(tmp_path: Path, row_id: str) -> Path:
    """A copy of the dev set holding only row ``row_id``, written under ``tmp_path``; the
    test is skipped where the dev set is not readable."""
    rows = dev_rows(row_id)
    path = tmp_path / "one.csv"
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path
