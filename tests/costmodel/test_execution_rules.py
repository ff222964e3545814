"""The field rules of `ExecutionOptions` (costmodel.execution_rules): every rule rejects an
out-of-range value with a message naming the field, and accepts the edges of its range."""

from __future__ import annotations

from typing import Any

import pytest

from costmodel.execution import ExecutionOptions
from costmodel.execution_rules import (
    CUDA_GRAPH_SCOPES,
    MOE_DISPATCHERS,
    PLAN_FEATURES,
    RUNTIMES,
    TP_OVERLAP_RS_METHODS,
    check_megatron_only,
    check_plan_features,
)
from specs.errors import SpecError

REJECTED: list[tuple[dict[str, Any], str]] = [
    ({"fp8_recipe": "blockwise"}, "fp8_recipe"),
    ({"runtime": "jax"}, "runtime must be one of"),
    ({"attention": "xformers"}, "attention"),
    ({"flash_attention_version": 1}, "flash_attention_version"),
    ({"cross_entropy_fusion": "liger"}, "cross_entropy_fusion"),
    ({"main_grad_bytes": 1}, "main_grad_bytes"),
    ({"gemm_rate_factor": 0.0}, "gemm_rate_factor"),
    ({"fp8_gemm_rate_factor": 1.5}, "fp8_gemm_rate_factor"),
    ({"sustained_gemm_rate_factor": 0.0}, "sustained_gemm_rate_factor"),
    ({"allocator_fragmentation": 1.0}, "allocator_fragmentation"),
    ({"allocator_fragmentation": -0.1}, "allocator_fragmentation"),
    ({"moe_dispatcher": "deepep"}, "moe_dispatcher"),
    ({"tp_overlap_rs_method": "bulk"}, "tp_overlap_rs_method"),
    ({"moe_load_imbalance": 0.9}, "moe_load_imbalance"),
    ({"cuda_graph_scopes": frozenset({"attn", "decoder"})}, r"cuda_graph_scopes .*'decoder'"),
    ({"moe_host_launch_s": -1e-6}, "moe_host_launch_s"),
    ({"moe_token_device_s": -1e-9}, "moe_token_device_s"),
    ({"plan_features": frozenset({"zero_bubble"})}, r"plan_features .*'zero_bubble'"),
    ({"runtime": "torch", "cudnn_norm": True}, "cudnn_norm"),
    ({"runtime": "torch", "precision_aware_optimizer": True}, "precision_aware_optimizer"),
]
"""One invalid value per rule, and the text its error names."""

ACCEPTED: list[dict[str, Any]] = [
    {"gemm_rate_factor": 1.0},
    {"fp8_gemm_rate_factor": 1.0, "sustained_gemm_rate_factor": 1.0},
    {"allocator_fragmentation": 0.0},
    {"moe_load_imbalance": 1.0, "moe_host_launch_s": 0.0, "moe_token_device_s": 0.0},
    {"flash_attention_version": 2, "main_grad_bytes": 2},
    {"cuda_graph_scopes": CUDA_GRAPH_SCOPES, "plan_features": frozenset()},
    {"runtime": "megatron", "cudnn_norm": True},
]
"""Values at the edges of each rule's range."""


@pytest.mark.parametrize(("fields", "match"), REJECTED)
def test_options_reject_each_rule(fields: dict[str, Any], match: str) -> None:
    with pytest.raises(SpecError, match=match):
        ExecutionOptions(**fields)


@pytest.mark.parametrize("fields", ACCEPTED)
def test_options_accept_range_edges(fields: dict[str, Any]) -> None:
    options = ExecutionOptions(**fields)
    assert all(getattr(options, name) == value for name, value in fields.items())


def test_every_named_choice_is_accepted() -> None:
    for runtime in RUNTIMES:
        assert ExecutionOptions(runtime=runtime).runtime == runtime
    for dispatcher in MOE_DISPATCHERS:
        assert ExecutionOptions(moe_dispatcher=dispatcher).moe_dispatcher == dispatcher
    for method in TP_OVERLAP_RS_METHODS:
        assert ExecutionOptions(tp_overlap_rs_method=method).tp_overlap_rs_method == method
    assert ExecutionOptions(plan_features=PLAN_FEATURES).plan_features == PLAN_FEATURES


def test_rule_messages_give_the_valid_names_and_fix() -> None:
    with pytest.raises(SpecError) as error:
        check_plan_features(frozenset({"sequence_parallel", "zero_bubble"}))
    assert "['zero_bubble']" in str(error.value)
    assert all(name in str(error.value) for name in PLAN_FEATURES)
    with pytest.raises(SpecError, match="use runtime='megatron', or drop cudnn_norm"):
        check_megatron_only(runtime="torch", cudnn_norm=True, precision_aware=False)
    check_megatron_only(runtime="megatron", cudnn_norm=True, precision_aware=True)
