"""The optimizer a published row's recipe runs: Megatron-core's layer-wise distributed Muon
for Megatron-Bridge's Kimi-K2, Adam for every other row.

Megatron-Bridge's Kimi-K2 performance configurations default to Muon from their first
release on: tag v0.3.1 (26.02.01, the first with ``scripts/performance/configs/kimi/``),
v0.4.0 (26.04) and v0.5.0 (26.06) ``scripts/performance/configs/kimi/kimi_llm_pretrain.py``
(``optimizer_type: str = "muon"`` in every ``kimi_k2_pretrain_config_<gpu>``) with
``scripts/performance/argument_parser.py`` ``--optimizer_type`` default ``"muon"``; HEAD
(v0.6.0, 26.08) ``src/megatron/bridge/recipes/kimi/h100/kimi_k2.py``
(``_apply_kimi_k2_optimizer(cfg, "muon")``), which ``perf_recipes/kimi/common.py`` builds
on. ``src/megatron/bridge/recipes/utils/optimizer_utils.py``
``distributed_muon_with_cosine_annealing`` sets ``optimizer="dist_muon"`` (Megatron-core's
``LayerWiseDistributedOptimizer``, `costmodel.optimizer_muon`) with ``muon_tp_mode
"blockwise"`` and 5 Newton-Schulz steps, and ``recipes/kimi/kimi_k2.py`` (v0.3.1-v0.5.0;
``_apply_kimi_k2_optimizer`` at v0.6.0) turns the distributed optimizer and the overlapped
parameter gather off for it ("Muon needs this to be False"), whatever the published page
prints in ``fsdp_or_zero``. Nothing here depends on the row's published figure.
"""

from __future__ import annotations

from recipe_keys import release_of, row_keys

MUON_RECIPES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("kimi_k2", ("26.02", "26.04", "26.06", "26.08")),
)
"""(model prefix, releases) of the Megatron-Bridge rows whose recipe runs ``dist_muon``
(module docstring)."""

MUON_PLAN_FIELDS: dict[str, object] = {
    "distributed_optimizer": False,
    "overlap_param_gather": False,
}
"""What the Muon recipes set in the DDP config (``use_distributed_optimizer = False``,
``overlap_param_gather = False``)."""


def row_optimizer(raw: dict[str, str]) -> str:
    """`specs.job.TrainingJob.optimizer` of a row: ``dist_muon`` for `MUON_RECIPES`,
    ``adam`` otherwise."""
    source = raw.get("source_id", "")
    if not source.startswith("MBRIDGE-"):
        return "adam"
    model, _, _ = row_keys(raw)
    release = release_of(source)
    muon = any(model.startswith(m) and release in rs for m, rs in MUON_RECIPES)
    return "dist_muon" if muon else "adam"


def optimizer_plan_fields(raw: dict[str, str]) -> dict[str, object]:
    """`MUON_PLAN_FIELDS` for a Muon row, empty otherwise."""
    return dict(MUON_PLAN_FIELDS) if row_optimizer(raw) != "adam" else {}
