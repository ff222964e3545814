"""Pure pieces of the executor's parallelism, without spawning: Megatron's layer split,
the zigzag context-parallel split, recompute groups, gradient buckets, the one-rank
context, and the bundle checks that reject what the executor cannot run."""

from __future__ import annotations

import importlib.util

import pytest
import torch
from torch import nn

from executor.context import ParallelContext, embedding_groups, fair_thread_count
from executor.context_parallel import SequenceLayout, zigzag_positions, zigzag_split
from executor.data_parallel import BucketedAllReduce, is_expert_parameter
from executor.engine import Engine, StepResult, check_bundle
from executor.model import plan_full_recompute
from executor.pipeline import rank_chunks, schedule_name, schedule_note, stage_index
from executor.precision import check_precision, import_transformer_engine
from specs import ClusterSpec, ModelSpec, ParallelPlan, PlanBundle, TrainingJob
from specs.errors import SpecError
from specs.layout import RankLayout


def _spec(**changes: object) -> ModelSpec:
    base = ModelSpec(
        name="unit",
        num_layers=4,
        hidden_size=32,
        num_attention_heads=4,
        num_query_groups=2,
        ffn_hidden_size=64,
        vocab_size=64,
        max_position_embeddings=32,
    )
    return base.replace(**changes)


def _bundle(model: ModelSpec, plan: ParallelPlan, *, seq: int = 16, batch: int = 8, **job):
    return PlanBundle(
        model=model,
        cluster=ClusterSpec(hardware="cpu", num_gpus=plan.world_size),
        job=TrainingJob(
            seq_length=seq, global_batch_size=batch, precision=job.get("precision", "fp32")
        ),
        plan=plan,
    )


def _ctx(plan: ParallelPlan) -> ParallelContext:
    """A context that knows its plan but holds no process groups (checks only)."""
    return ParallelContext(
        plan=plan, layout=RankLayout.from_plan(plan), rank=0, device=torch.device("cpu")
    )


# ---- pipeline split -------------------------------------------------------------------


def _layers(model: ModelSpec, plan: ParallelPlan, pp_rank: int) -> list[list[int]]:
    return [list(c.layers) for c in rank_chunks(model, plan, pp_rank)]


def test_chunks_hold_megatrons_interleaved_layers() -> None:
    # megatron-facts.md §3.3: chunk j of rank r holds [(j·p + r)·Lc, (j·p + r + 1)·Lc).
    eight = _spec(num_layers=8)
    assert _layers(eight, ParallelPlan(pp=2, vpp=2), 0) == [[0, 1], [4, 5]]
    assert _layers(eight, ParallelPlan(pp=2, vpp=2), 1) == [[2, 3], [6, 7]]
    assert _layers(eight, ParallelPlan(pp=4), 3) == [[6, 7]]
    assert [stage_index(2, r, j) for j in range(2) for r in range(2)] == [0, 1, 2, 3]
    with pytest.raises(SpecError, match="divisible"):
        rank_chunks(_spec(num_layers=6), ParallelPlan(pp=2, vpp=2), 0)


def test_uneven_chunks_follow_the_split() -> None:
    # Hand-worked (megatron-facts.md §8.2-8.3): 6 layers on pp 3 with first/last 1 leave 4
    # for the middle rank; 6 layers + embedding + loss over pp 4 give 2 per stage, the first
    # and last stage one layer short; the layout puts E on stage 0 and L on stage 2.
    six = _spec(num_layers=6)
    first_last = ParallelPlan(
        pp=3, decoder_first_pipeline_num_layers=1, decoder_last_pipeline_num_layers=1
    )
    assert [_layers(six, first_last, r) for r in range(3)] == [[[0]], [[1, 2, 3, 4]], [[5]]]
    account = ParallelPlan(
        pp=4,
        account_for_embedding_in_pipeline_split=True,
        account_for_loss_in_pipeline_split=True,
    )
    assert [_layers(six, account, r) for r in range(4)] == [[[0]], [[1, 2]], [[3, 4]], [[5]]]
    layout = ParallelPlan(pp=3, pipeline_model_parallel_layout="E|tt|ttttL")
    assert [_layers(six, layout, r) for r in range(3)] == [[[]], [[0, 1]], [[2, 3, 4, 5]]]
    ends = [(c.embedding, c.loss) for r in range(3) for c in rank_chunks(six, layout, r)]
    assert ends == [(True, False), (False, False), (False, True)]


def test_schedule_is_gpipe_below_pp_microbatches() -> None:
    assert schedule_name(ParallelPlan(), 1) is None
    assert schedule_name(ParallelPlan(pp=2), 2) == "1F1B"
    assert schedule_name(ParallelPlan(pp=4), 3) == "GPipe"
    assert schedule_name(ParallelPlan(pp=2, vpp=2), 4) == "Interleaved1F1B"
    assert schedule_note(ParallelPlan(pp=2), 4) is None
    note = schedule_note(ParallelPlan(pp=4), 1)
    assert note is not None and "GPipe" in note and "pp (4)" in note


def test_full_recompute_groups_follow_the_method() -> None:
    keys = ["4", "5", "6", "7"]
    assert plan_full_recompute(keys, "uniform", None) == [["4"], ["5"], ["6"], ["7"]]
    assert plan_full_recompute(keys, "uniform", 2) == [["4", "5"], ["6", "7"]]
    assert plan_full_recompute(keys, "block", 1) == [["4"]]
    assert plan_full_recompute(keys, "block", None) == [["4"], ["5"], ["6"], ["7"]]


# ---- context parallel -------------------------------------------------------------------


def test_zigzag_gives_rank_i_chunks_i_and_2c_minus_1_minus_i() -> None:
    # megatron-facts.md §7.1: 2·cp chunks, rank i keeps chunks i and 2cp-1-i.
    assert zigzag_positions(8, 2, 0).tolist() == [0, 1, 6, 7]
    assert zigzag_positions(8, 2, 1).tolist() == [2, 3, 4, 5]
    held = torch.cat([zigzag_positions(16, 4, r) for r in range(4)])
    assert sorted(held.tolist()) == list(range(16))
    tokens = torch.arange(24).view(3, 8)
    assert zigzag_split(tokens, 2, 1).tolist()[1] == [10, 11, 12, 13]
    with pytest.raises(SpecError, match="divisible by 2·cp"):
        zigzag_positions(12, 4, 0)


def test_context_parallel_mask_is_causal_in_global_positions() -> None:
    layout = SequenceLayout.zigzag(8, 2, 0, torch.device("cpu"))
    mask = layout.causal_mask()  # queries at 0, 1, 6, 7; keys at 0, 1, 6, 7, 2, 3, 4, 5
    assert mask.shape == (4, 8)
    assert mask[0].tolist() == [True, False, False, False, False, False, False, False]
    assert mask[2].tolist() == [True, True, True, False, True, True, True, True]


# ---- data parallel ------------------------------------------------------------------------


def test_buckets_close_at_the_size_in_reverse_order_and_divide() -> None:
    params = [nn.Parameter(torch.zeros(n)) for n in (3, 5, 2, 4)]
    sync = BucketedAllReduce(params, None, bucket_numel=6, divide_by=2.0)
    assert [[p.numel() for p in b] for b in sync.buckets] == [[4, 2], [5, 3]]
    for i, p in enumerate(params[:3]):
        p.grad = torch.full_like(p, float(i + 1))
    sync.sync()
    assert params[1].grad.tolist() == [1.0] * 5
    assert params[3].grad.tolist() == [0.0] * 4  # a missing gradient counts as zero
    assert is_expert_parameter("layers.3.feed_forward.experts.w1")
    assert not is_expert_parameter("layers.3.feed_forward.router.weight")


# ---- context --------------------------------------------------------------------------------


def test_single_context_has_no_groups() -> None:
    ctx = ParallelContext.single()
    assert ctx.world_size == 1 and ctx.size("tp") == 1 and ctx.group("dp_cp") is None
    assert ctx.coords["pp"] == 0 and ctx.coords["ep"] == 0
    with pytest.raises(SpecError, match="no device mesh"):
        ctx.submesh("tp")
    with pytest.raises(SpecError, match="one-rank plan"):
        ParallelContext.single(ParallelPlan(tp=2))
    with pytest.raises(SpecError, match="not initialized"):
        ParallelContext.create(ParallelPlan(dp=2))
    with pytest.raises(SpecError, match="unknown group"):
        ctx.size("sp")


def test_embedding_groups_pair_the_ends_of_each_pipeline() -> None:
    layout = RankLayout.from_plan(ParallelPlan(tp=2, pp=3))
    assert embedding_groups(layout) == ((0, 4), (1, 5))
    assert embedding_groups(RankLayout.from_plan(ParallelPlan(dp=4))) == ()


def test_each_rank_gets_its_share_of_the_cores() -> None:
    cores = fair_thread_count(1)
    assert cores >= 1
    assert fair_thread_count(2) == max(1, cores // 2)
    assert fair_thread_count(10_000) == 1


# ---- checks ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "plan", "match"),
    [
        # Megatron's rules (specs.rules), named by rule id in the message.
        (_spec(), ParallelPlan(tp=8), "heads_divisible_by_tp"),
        (_spec(ffn_hidden_size=65), ParallelPlan(tp=2), "ffn_divisible_by_tp"),
        (_spec(), ParallelPlan(dp=3), "global_batch_divisible_by_mbs_dp"),
        (_spec(), ParallelPlan(pp=2, vpp=2, schedule="interleaved"), "microbatches"),
        (
            _spec(position_embedding="learned", max_position_embeddings=8),
            ParallelPlan(),
            "max_position",
        ),
        # Limits of the executor.
        (_spec(num_query_groups=1), ParallelPlan(tp=2), "kv_heads_divisible_by_tp_outside"),
        (_spec(num_experts=4), ParallelPlan(tp=2, sequence_parallel=True), "expert tensor"),
        (_spec(num_experts=4), ParallelPlan(tp=2, etp=1), "sequence_parallel=true"),
        (
            _spec(kv_lora_rank=8, qk_head_dim=8, qk_pos_emb_head_dim=4, v_head_dim=8),
            ParallelPlan(),
            "multi-latent",
        ),
    ],
)
def test_bundles_the_executor_cannot_run_are_rejected(model, plan, match) -> None:
    # batch 4, mbs 1: pp 2 · vpp 2 would get 4 / 1 / 1 = 4 micro-batches, so use mbs 4 there.
    plan = plan.replace(micro_batch_size=4) if plan.vpp > 1 else plan
    with pytest.raises(SpecError, match=match):
        check_bundle(_bundle(model, plan, batch=4), _ctx(plan))


def test_a_plan_within_the_limits_passes_the_checks() -> None:
    plan = ParallelPlan(tp=2, cp=2, sequence_parallel=True, pp=2, vpp=2, schedule="interleaved")
    check_bundle(_bundle(_spec(), plan, batch=4), _ctx(plan))


def test_context_and_bundle_must_describe_the_same_plan() -> None:
    with pytest.raises(SpecError, match="context was built for"):
        check_bundle(_bundle(_spec(), ParallelPlan(tp=2)), _ctx(ParallelPlan(dp=2)))


def test_fp8_needs_cuda_and_transformer_engine() -> None:
    with pytest.raises(SpecError, match="needs a CUDA device"):
        check_precision("fp8", torch.device("cpu"), 1)
    with pytest.raises(SpecError, match="tp=2"):
        check_precision("fp8", torch.device("cuda"), 2)
    check_precision("bf16", torch.device("cpu"), 4)
    if importlib.util.find_spec("transformer_engine") is not None:
        pytest.skip("transformer_engine is installed here")
    with pytest.raises(SpecError, match="Transformer Engine"):
        import_transformer_engine()


def test_train_step_checks_the_token_shape_and_reports_the_batch() -> None:
    plan = ParallelPlan(micro_batch_size=2)
    engine = Engine.build(
        _bundle(_spec(num_layers=1), plan, batch=4), ParallelContext.single(plan), seed=0
    )
    with pytest.raises(SpecError, match=r"\(4, 17\)"):
        engine.train_step(torch.zeros(4, 16, dtype=torch.long))
    result = engine.train_step(torch.zeros(4, 17, dtype=torch.long))
    assert isinstance(result, StepResult)
    assert result.num_microbatches == 2 and result.num_tokens == 64
