"""Tests of `specs.pipeline_split` and its checks (`specs.pipeline_split_checks`): the layer
assignment of every (pipeline rank, chunk) against hand-worked cases of Megatron-LM's
split, the layout grammar, and invariants over random valid splits (every layer exactly
once, in virtual-stage order)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specs import serde
from specs.errors import SpecError
from specs.model import ModelSpec
from specs.pipeline_layout import compress_layout, expand_layout, layout_vpp
from specs.pipeline_split import pipeline_split
from specs.pipeline_split_checks import first_last_options, split_problem
from specs.plan import ParallelPlan
from specs.virtual_stages import vpp_from_layers_per_virtual_stage


def _model(num_layers: int, mtp: int = 0) -> ModelSpec:
    return ModelSpec(
        name=f"l{num_layers}",
        num_layers=num_layers,
        hidden_size=256,
        num_attention_heads=8,
        ffn_hidden_size=512,
        vocab_size=1000,
        mtp_num_layers=mtp,
    )


def _plan(**fields: object) -> ParallelPlan:
    vpp = fields.get("vpp", 1)
    return ParallelPlan(schedule="interleaved" if vpp > 1 else "1f1b", **fields)  # type: ignore[arg-type]


def test_llama3_405b_pp16_first_last_7() -> None:
    # 126 layers, first and last stage 7, the 112 others 8 on each of the 14 middle stages
    # (Llama 3 405B on 16,384 H100: TP8 PP16, arXiv 2407.21783 §3.3.2).
    split = pipeline_split(
        _model(126),
        _plan(pp=16, decoder_first_pipeline_num_layers=7, decoder_last_pipeline_num_layers=7),
    )
    assert split.chunk(0, 0).layers == range(0, 7) and split.chunk(0, 0).embedding
    for rank in range(1, 15):
        start = 7 + 8 * (rank - 1)
        assert split.chunk(rank, 0).layers == range(start, start + 8)
        assert not split.chunk(rank, 0).embedding and not split.chunk(rank, 0).loss
    assert split.chunk(15, 0).layers == range(119, 126) and split.chunk(15, 0).loss
    assert not split.is_even


def test_126_layers_pp8_vpp8_both_account_flags() -> None:
    # (126 + 2) / (8·8) = 2 per virtual stage; the embedding takes one slot of virtual
    # stage 0 and the loss one of virtual stage 63.
    split = pipeline_split(
        _model(126),
        _plan(
            pp=8,
            vpp=8,
            account_for_embedding_in_pipeline_split=True,
            account_for_loss_in_pipeline_split=True,
        ),
    )
    assert split.chunk(0, 0).layers == range(0, 1) and split.chunk(0, 0).embedding
    assert split.chunk(7, 7).layers == range(125, 126) and split.chunk(7, 7).loss
    for rank in range(8):
        for chunk in range(8):
            v = chunk * 8 + rank
            if v not in (0, 63):
                assert split.chunk(rank, chunk).layers == range(2 * v - 1, 2 * v + 1)
    assert [split.rank_num_layers(r) for r in range(8)] == [15] + [16] * 6 + [15]


def test_94_layers_pp8_vpp4_both_account_flags() -> None:
    # Qwen3-235B-A22B: (94 + 2) / 8 = 12 per rank, 3 per chunk; first and last chunk 2.
    split = pipeline_split(
        _model(94),
        _plan(
            pp=8,
            vpp=4,
            account_for_embedding_in_pipeline_split=True,
            account_for_loss_in_pipeline_split=True,
        ),
    )
    assert split.chunk(0, 0).layers == range(0, 2)
    assert split.chunk(1, 0).layers == range(2, 5)
    assert split.chunk(0, 1).layers == range(23, 26)  # virtual stage 8: 3·8 - 1
    assert split.chunk(7, 3).layers == range(92, 94) and split.chunk(7, 3).loss
    assert [split.rank_num_layers(r) for r in range(8)] == [11] + [12] * 6 + [11]


def test_61_layers_deepseek_layout_pp8_vpp4() -> None:
    # DeepSeek-V3: E and one layer, 30 stages of two layers, then the MTP layer and the loss.
    split = pipeline_split(
        _model(61, mtp=1), _plan(pp=8, vpp=4, pipeline_model_parallel_layout="Et|(tt|)*30mL")
    )
    assert split.chunk(0, 0).layers == range(0, 1) and split.chunk(0, 0).embedding
    for v in range(1, 31):
        rank, chunk = v % 8, v // 8
        assert split.chunk(rank, chunk).layers == range(2 * v - 1, 2 * v + 1)
    last = split.chunk(7, 3)
    assert last.layers == range(61, 61) and last.mtp_layers == 1 and last.loss
    assert [split.rank_num_layers(r) for r in range(8)] == [7] + [8] * 6 + [6]
    assert split.rank_mtp_layers(7) == 1 and split.rank_mtp_layers(0) == 0


def test_even_split_and_mtp_default_place() -> None:
    split = pipeline_split(_model(8, mtp=2), _plan(pp=2, vpp=2))
    assert [[c.layers for c in rank] for rank in split.chunks] == [
        [range(0, 2), range(4, 6)],
        [range(2, 4), range(6, 8)],
    ]
    assert split.chunk(1, 1).mtp_layers == 2 and split.is_even


def test_first_only_and_vpp_offsets_follow_megatron() -> None:
    # Megatron's offset with uneven first stage and vpp: vp_stage·(first/v + middle/v) +
    # first/v + (rank - 1)·(middle/v)/(middle ranks); 4 + 3·4 = 16 layers, pp4 vpp2.
    split = pipeline_split(_model(16), _plan(pp=4, vpp=2, decoder_first_pipeline_num_layers=4))
    assert split.chunk(0, 0).layers == range(0, 2)
    assert split.chunk(1, 0).layers == range(2, 4)
    assert split.chunk(3, 0).layers == range(6, 8)
    assert split.chunk(0, 1).layers == range(8, 10)
    assert split.chunk(2, 1).layers == range(12, 14)


@pytest.mark.parametrize(
    ("plan", "rule"),
    [
        (_plan(pp=16), "layers_divisible_by_pp"),
        (_plan(pp=2, vpp=4), "layers_per_stage_divisible_by_vpp"),
        (
            _plan(pp=16, decoder_first_pipeline_num_layers=7),
            "uneven_middle_layers_divisible_by_middle_stages",
        ),
        (
            _plan(pp=2, decoder_first_pipeline_num_layers=7, decoder_last_pipeline_num_layers=7),
            "uneven_layers_cover_model",
        ),
        (_plan(pp=8, pipeline_model_parallel_layout="Et|(tt|)*30mL"), "layout_stages_match_pp_vpp"),
        (
            _plan(pp=8, vpp=4, pipeline_model_parallel_layout="Et|(tt|)*30tL"),
            "layout_covers_num_layers",
        ),
    ],
)
def test_invalid_split_raises_with_rule_id(plan: ParallelPlan, rule: str) -> None:
    with pytest.raises(SpecError, match=rule):
        pipeline_split(_model(126), plan)


def test_layout_grammar() -> None:
    assert expand_layout("Ettt|(tt|)*2,m|L") == ("Ettt", "tt", "tt", "m", "L")
    assert expand_layout("E|t*3|L") == ("E", "ttt", "L")
    assert expand_layout("(|tt)*2") == ("", "tt", "tt")
    with pytest.raises(SpecError, match="'x'"):
        expand_layout("Etx|L")


@pytest.mark.parametrize("layout", ["", " ", ",,"])
def test_an_empty_layout_is_no_layout_of_one_stage(layout: str) -> None:
    # "" once expanded to one empty virtual stage; Megatron-LM has no empty layout
    with pytest.raises(SpecError, match="pipeline_model_parallel_layout must hold"):
        expand_layout(layout)
    with pytest.raises(SpecError, match=r"got '.*': write them between '\|'"):
        ParallelPlan(pp=2, pipeline_model_parallel_layout=layout)


@pytest.mark.parametrize(
    ("layout", "repeat"),
    [
        ("(t)*99999999999|L", "'(t)*99999999999'"),
        ("Et|t*999999999999", "'t*999999999999'"),
        ("(t|)*70000L", "'(t|)*70000'"),
        ("t*" + "9" * 5000, "'t*999"),
    ],
)
def test_a_repeat_past_the_longest_layout_is_refused_unbuilt(layout: str, repeat: str) -> None:
    # `paraplan estimate --pipeline-model-parallel-layout '(t)*99999999999|L'` built the
    # string and ended in a MemoryError; 5,000 digits ended in int()'s digit limit
    with pytest.raises(SpecError, match=f"the repeat {re.escape(repeat)}.* past 65,536 characters"):
        expand_layout(layout)
    assert layout_vpp(layout, 2) is None


def test_a_repeat_up_to_the_longest_layout_expands() -> None:
    assert len(expand_layout("E|(t|)*32766L")) == 32768
    assert expand_layout("E|t*65530|L")[1] == "t" * 65530


@given(
    st.lists(
        st.sampled_from(["", "t", "tt", "ttt", "Et", "mL", "t" * 5]), min_size=1, max_size=12
    ).filter(lambda stages: stages != [""])  # the empty string is no layout
)
def test_compress_layout_round_trips(stages: list[str]) -> None:
    assert expand_layout(compress_layout(tuple(stages))) == tuple(stages)


def test_first_last_options_balance() -> None:
    assert first_last_options(126, 16, 1)[0] == (7, 8)
    assert first_last_options(126, 2, 1) == []
    assert all((126 - 2 * x) % 14 == 0 and x % 2 == 0 for x, _ in first_last_options(126, 16, 2))


def test_plan_round_trips_with_split_fields() -> None:
    plan = _plan(pp=8, vpp=4, pipeline_model_parallel_layout="Et|(tt|)*30mL")
    assert serde.loads(ParallelPlan, serde.dumps(plan)) == plan
    plan = _plan(pp=16, decoder_first_pipeline_num_layers=7, decoder_last_pipeline_num_layers=7)
    assert serde.loads(ParallelPlan, serde.dumps(plan)) == plan
    with pytest.raises(SpecError, match="decoder_first_pipeline_num_layers"):
        ParallelPlan(decoder_first_pipeline_num_layers=0)


@st.composite
def _valid_split(draw: st.DrawFn) -> tuple[ModelSpec, ParallelPlan]:
    pp = draw(st.integers(1, 6))
    vpp = draw(st.integers(1, 3)) if pp > 1 else 1
    kind = draw(st.sampled_from(["even", "account", "first_last", "layout"]))
    if kind == "layout":
        stages = draw(
            st.lists(st.sampled_from(["", "t", "tt", "ttt"]), min_size=pp * vpp, max_size=pp * vpp)
        )
        stages[0], stages[-1] = "E" + stages[0], stages[-1] + "L"
        layers = max(1, "".join(stages).count("t"))
        if "".join(stages).count("t") == 0:
            stages[0] += "t"
        return _model(layers), _plan(
            pp=pp, vpp=vpp, pipeline_model_parallel_layout="|".join(stages)
        )
    if kind == "first_last" and pp >= 3:
        x = vpp * draw(st.integers(1, 3))
        middle = vpp * draw(st.integers(1, 3))
        layers = 2 * x + (pp - 2) * middle
        return _model(layers), _plan(
            pp=pp, vpp=vpp, decoder_first_pipeline_num_layers=x, decoder_last_pipeline_num_layers=x
        )
    emb, loss = (draw(st.booleans()), draw(st.booleans())) if kind == "account" else (False, False)
    per_chunk = draw(st.integers(1, 3))
    layers = pp * vpp * per_chunk - emb - loss
    return _model(max(layers, 1)), _plan(
        pp=pp,
        vpp=vpp,
        account_for_embedding_in_pipeline_split=emb and layers >= 1,
        account_for_loss_in_pipeline_split=loss and layers >= 1,
    )


@settings(max_examples=200, deadline=None)
@given(_valid_split())
def test_every_layer_once_in_virtual_stage_order(case: tuple[ModelSpec, ParallelPlan]) -> None:
    model, plan = case
    if split_problem(model, plan) is not None:
        return
    split = pipeline_split(model, plan)
    ordered = [i for c in split.in_forward_order() for i in c.layers]
    assert ordered == list(range(model.num_layers))
    assert sum(c.embedding for r in split.chunks for c in r) == 1
    assert sum(c.loss for r in split.chunks for c in r) == 1


def test_layout_vpp_is_stages_over_pp() -> None:
    # validate_args: virtual_pipeline_model_parallel_size = stages // pp
    assert layout_vpp("Et*3|(tt|)*29m|L", 16) == 2
    assert layout_vpp("Et*3|(tt|)*29m|L", 32) == 1
    assert layout_vpp("Et*3|(tt|)*29m|L", 6) is None  # 32 stages on 6 ranks
    assert layout_vpp("Et|x|L", 3) is None  # does not parse; layout_parses says why


def test_vpp_from_layers_per_virtual_stage_follows_validate_args() -> None:
    # validate_args: vpp = ((num_layers + account-for flags) / pp) / N, each division exact
    def vpp(num_layers: int, pp: int, n: int, *, counted: bool = False) -> int:
        return vpp_from_layers_per_virtual_stage(
            num_layers=num_layers, pp=pp, layers_per_virtual_stage=n, embedding=counted,
            loss=counted,
        )  # fmt: skip

    assert vpp(32, 4, 2) == 4
    assert vpp(126, 8, 2, counted=True) == 8  # Llama 3.1 405B, 128 counted layers
    assert vpp(32, 4, 8) == 1
    with pytest.raises(SpecError, match=r"\(3\) must divide .* = 8: use N in \[1, 2, 4, 8\]"):
        vpp(32, 4, 3)
    with pytest.raises(SpecError, match=r"num_layers \(126\) \+ 2 accounted = 128 divisible"):
        vpp(126, 3, 2, counted=True)
    with pytest.raises(SpecError, match="positive integer, got 0"):
        vpp(32, 4, 0)
    # --pp 0 beside the flag ended in a ZeroDivisionError before ParallelPlan's own check
    with pytest.raises(SpecError, match=r"ParallelPlan.pp must be a positive integer, got 0"):
        vpp(32, 0, 1)
