"""Transformer Engine's userbuffers settings of a TP-overlapped plan as the YAML file of
Megatron-LM's ``--tp-comm-overlap-cfg`` (`planner.export_options`).

Megatron-LM takes userbuffers methods and SM margins only from that file
(``megatron/training/initialize.py`` loads it and passes it to TE's ``initialize_ub`` as
``ub_cfgs``); TE updates its default config of each named GEMM with the file's entries
(`transformer_engine/pytorch/module/base.py`), so the file names only what differs from
TE's defaults.
"""

from __future__ import annotations

from typing import Any

from costmodel.execution import ExecutionOptions
from specs.plan import ParallelPlan

TP_OVERLAP_CFG_FILE = "tp_comm_overlap_cfg.yaml"
"""File the launch snippet writes for ``--tp-comm-overlap-cfg`` (`userbuffers_config`)."""

ROW_PARALLEL_FPROP = ("proj_fprop", "fc2_fprop")
"""Userbuffers names of the row-parallel forward GEMMs (reduce-scatter overlap)."""

BULK_OVERLAPS = ("qkv_dgrad", "qkv_wgrad", "fc1_dgrad", "fc1_wgrad")
"""Userbuffers names of Transformer Engine's ``bulk`` overlaps."""


def userbuffers_config(options: ExecutionOptions) -> dict[str, dict[str, Any]]:
    """Transformer Engine ``initialize_ub`` settings by GEMM name that state the userbuffers
    fields of ``options``; Megatron-LM reads them from the YAML file of
    ``--tp-comm-overlap-cfg``, and TE updates its default config of each named GEMM with
    them (`transformer_engine/pytorch/module/base.py`). ``ring_exchange`` for the
    row-parallel forward GEMMs is Megatron-Bridge's ``RingExchangeOverlapCfg(num_sm=1,
    set_sm_margin=True)`` (``src/megatron/bridge/training/comm_overlap.py``), the
    configuration `ExecutionOptions.tp_overlap_rs_method` names; the SM margins are
    ``set_sm_margin: false``. Empty at TE's defaults."""
    config: dict[str, dict[str, Any]] = {}
    if options.tp_overlap_rs_method == "ring_exchange":
        ring = {"method": "ring_exchange", "num_sm": 1, "set_sm_margin": True}
        config |= {name: dict(ring) for name in ROW_PARALLEL_FPROP}
    elif not options.tp_overlap_pipeline_sm_margin:
        config |= {name: {"set_sm_margin": False} for name in ROW_PARALLEL_FPROP}
    if not options.tp_overlap_bulk_sm_margin:
        config |= {name: {"set_sm_margin": False} for name in BULK_OVERLAPS}
    return config


def userbuffers_yaml(config: dict[str, dict[str, Any]]) -> list[str]:
    """``config`` as the lines of a YAML mapping of mappings (scalars only)."""

    def scalar(value: Any) -> str:
        return ("true" if value else "false") if isinstance(value, bool) else str(value)

    lines = []
    for name, settings in config.items():
        lines.append(f"{name}:")
        lines += [f"  {key}: {scalar(value)}" for key, value in settings.items()]
    return lines


def userbuffers_arguments(options: ExecutionOptions, plan: ParallelPlan) -> list[str]:
    """``--tp-comm-overlap-cfg`` `TP_OVERLAP_CFG_FILE` when the plan overlaps TP
    communication and `userbuffers_config` is not empty; without ``--tp-comm-overlap``
    the settings priced nothing and none is written."""
    if not plan.tp_comm_overlap or not userbuffers_config(options):
        return []
    return ["--tp-comm-overlap-cfg", TP_OVERLAP_CFG_FILE]
