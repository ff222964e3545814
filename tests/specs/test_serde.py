"""JSON round trip and input checking of the spec dataclasses (specs.serde)."""

from __future__ import annotations

import json

import pytest

from specs import ClusterSpec, ModelSpec, ParallelPlan, PlanBundle, SpecError, TrainingJob
from specs.serde import dumps, from_dict, load, loads, to_dict

MODEL = ModelSpec(
    name="m",
    num_layers=4,
    hidden_size=128,
    num_attention_heads=4,
    num_query_groups=2,
    ffn_hidden_size=256,
    vocab_size=512,
    num_experts=4,
    moe_capacity_factor=1.25,
)
BUNDLE = PlanBundle(
    model=MODEL,
    cluster=ClusterSpec(hardware="h100-sxm-80gb", num_gpus=8, gpus_per_node=8),
    job=TrainingJob(seq_length=1024, global_batch_size=64, token_budget=10**12),
    plan=ParallelPlan.for_world(8, tp=2, pp=2, vpp=2, ep=2, sequence_parallel=True),
)


@pytest.mark.parametrize("spec", [MODEL, BUNDLE.cluster, BUNDLE.job, BUNDLE.plan, BUNDLE])
def test_round_trip_is_lossless(spec: object) -> None:
    text = dumps(spec)
    again = loads(type(spec), text)
    assert again == spec
    assert dumps(again) == text


def test_round_trip_through_a_file(tmp_path) -> None:
    path = tmp_path / "plan.json"
    path.write_text(dumps(BUNDLE))
    assert load(PlanBundle, path) == BUNDLE


def test_unknown_key_names_the_key_and_the_valid_ones() -> None:
    data = to_dict(BUNDLE.plan) | {"tensor_parallel": 2}
    with pytest.raises(SpecError) as err:
        from_dict(ParallelPlan, data)
    assert "'tensor_parallel'" in str(err.value)
    assert "micro_batch_size" in str(err.value)


def test_unknown_key_in_a_nested_spec_says_where() -> None:
    data = to_dict(BUNDLE)
    data["job"]["seq_len"] = 4
    with pytest.raises(SpecError, match=r"PlanBundle\.job: unknown key 'seq_len'.*seq_length"):
        from_dict(PlanBundle, data)


@pytest.mark.parametrize(
    ("key", "value", "needle"),
    [
        ("tp", "2", "expected an integer"),
        ("tp", True, "expected an integer"),
        ("tp", 0, "positive integer"),
        ("recompute", "some", "must be one of"),
        ("sequence_parallel", 1, "expected true or false"),
    ],
)
def test_bad_values_are_rejected(key: str, value: object, needle: str) -> None:
    with pytest.raises(SpecError, match=needle):
        from_dict(ParallelPlan, {key: value})


def test_missing_required_key() -> None:
    with pytest.raises(SpecError, match=r"missing required key.*num_gpus"):
        from_dict(ClusterSpec, {"hardware": "h100-sxm-80gb"})


def test_malformed_json_reports_line_and_column() -> None:
    with pytest.raises(SpecError, match="malformed JSON at line 1 column"):
        loads(ParallelPlan, '{"tp": 2,,}')


def test_negative_sizes_are_rejected_at_construction() -> None:
    with pytest.raises(SpecError, match="num_layers must be a positive integer, got -1"):
        MODEL.replace(num_layers=-1)
    with pytest.raises(SpecError, match="global_batch_size"):
        TrainingJob(seq_length=128, global_batch_size=0)


def test_json_is_plain() -> None:
    data = json.loads(dumps(BUNDLE))
    assert data["plan"]["tp"] == 2 and data["plan"]["schedule"] == "interleaved"
    assert data["plan"]["dp"] == 2


def test_frozensets_are_sorted_lists() -> None:
    from dataclasses import dataclass

    @dataclass(frozen=True, kw_only=True, slots=True)
    class Scopes:
        names: frozenset[str] = frozenset()

    spec = Scopes(names=frozenset({"mlp", "attn"}))
    assert to_dict(spec) == {"names": ["attn", "mlp"]}
    assert from_dict(Scopes, {"names": ["mlp", "attn"]}) == spec
    with pytest.raises(SpecError, match=r"Scopes.names: expected a list, got str"):
        from_dict(Scopes, {"names": "attn"})
    with pytest.raises(SpecError, match=r"Scopes.names\[1\]: expected a string, got 3"):
        from_dict(Scopes, {"names": ["attn", 3]})


def test_bundle_execution_record_defaults_to_empty() -> None:
    data = to_dict(BUNDLE)
    assert data["execution"] == {}
    del data["execution"]  # a plan file written before the record existed
    assert from_dict(PlanBundle, data) == BUNDLE
