"""Keys of a published row that the recipe tables match: source, model, GPU, precision, release.

Shared by the recipe modules of `bench/` (`row_recipes`, `pipeline_recipes`,
`overlap_recipes`, `saver_recipes`, `precision_recipes`): a row of
``published-runs-dev.csv`` is matched by the prefix of its ``source_id`` and model name,
its GPU type and printed precision, and, for Megatron-Bridge rows, the release (NeMo
container) its source names.
"""

from __future__ import annotations


class NotExpressible(Exception):
    """A row field that the specs or the stored profiles cannot express yet."""


ALL_RELEASES = ("25.09", "25.11", "26.02", "26.04", "26.06")
"""Megatron-Bridge releases of the dev set's rows (NeMo containers), oldest first."""

H100_RELEASES = (*ALL_RELEASES, "26.08")
"""The releases of Megatron-Bridge's H100 recipes: `ALL_RELEASES` and HEAD (067f987d, tag
v0.6.0, ``src/megatron/bridge/perf_recipes/*/h100/``), whose model verification cards
(``examples/model_verification_cards/*/card.yaml``) name 26.08 containers."""


def matches(raw: dict[str, str], table: tuple[tuple[str, str], ...]) -> bool:
    """True when the row's ``source_id`` and lower-case model start with one of the
    (source prefix, model prefix) pairs of ``table``."""
    source = raw.get("source_id", "")
    model = raw.get("model", "").strip().lower()
    return any(source.startswith(s) and model.startswith(m) for s, m in table)


def row_keys(raw: dict[str, str]) -> tuple[str, str, str]:
    """(model in lower case, GPU type and printed precision in upper case) of a CSV row, the
    keys its recipe tables match by prefix."""
    return (
        (raw.get("model") or "").strip().lower(),
        (raw.get("gpu_type") or "").strip().upper(),
        (raw.get("precision") or "").strip().upper(),
    )


def release_of(source: str) -> str:
    """The Megatron-Bridge release of a source: ``25.09`` of ``MBRIDGE-25.09``; ``26.04`` of
    ``MBRIDGE-26.04.01``."""
    return source.removeprefix("MBRIDGE-")[:5]


def is_fp8(precision: str) -> bool:
    """FP8 current scaling or MXFP8 as the rows print them (25.09: "not stated" with
    current scaling as the main value, or the "alternative quantization granularity")."""
    upper = precision.upper()
    if upper.startswith(("NVFP4", "BF16")):
        return False
    return "FP8" in upper or upper.startswith(("NOT STATED", "ALTERNATIVE"))
