"""The executor's peak memory per stage (`costmodel.runtimes.torch.memory`): what torch's
interleaved runtime holds at its peak, and a step of one microbatch."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from costmodel.activations import in_flight_chunk_counts
from costmodel.runtimes.torch.memory import executor_memory_per_stage, interleaved_runtime_peak
from specs.job import TrainingJob
from specs.plan import ParallelPlan
from specs.presets import get_preset

TINY = get_preset("tiny")


@settings(max_examples=60, deadline=None)
@given(
    pp=st.sampled_from((2, 4)),
    vpp=st.integers(2, 4),
    rounds=st.integers(1, 4),
    data=st.data(),
)
def test_without_held_sends_the_peak_is_the_warmup_plus_one(pp, vpp, rounds, data):
    stage = data.draw(st.integers(0, pp - 1))
    m = rounds * pp
    counts, _ = interleaved_runtime_peak(pp, vpp, stage, m, [1.0] * vpp, 0.0)
    assert counts == in_flight_chunk_counts(pp, vpp, stage, m)


@settings(max_examples=60, deadline=None)
@given(pp=st.sampled_from((2, 4)), vpp=st.integers(2, 4), rounds=st.integers(1, 4))
def test_sends_held_at_the_step_end_are_every_send_of_the_step(pp, vpp, rounds):
    m = rounds * pp
    for stage in range(pp):
        # sends far heavier than activations: the peak moves to the last forward
        counts, sends = interleaved_runtime_peak(pp, vpp, stage, m, [1.0] * vpp, 1e9)
        forwards = m * vpp - (m if stage == pp - 1 else 0)  # the last virtual stage sends none
        warmup = sum(in_flight_chunk_counts(pp, vpp, stage, m)) - 1
        backwards_done = m * vpp - warmup - 1  # every 1F1B pair but the last one's backward
        assert sends >= forwards
        assert sends <= forwards + backwards_done
        assert sum(counts) == warmup + 1  # the steady phase holds its count to the end


def test_pp2_vpp2_rank0_by_hand():
    # m = 8: warmup 4 forwards (chunks 0 0 1 1), then pairs; the peak with heavy sends is
    # after the 16th forward: 16 forward sends (stage 0 and stage 2 both send) and, of the
    # 11 backwards done, those of chunk 1 (stage 2, which sends to stage 1): rounds of 2
    # backwards alternate chunk 1, chunk 0 -> chunk 1 ran 6 of them.
    counts, sends = interleaved_runtime_peak(2, 2, 0, 8, [1.0, 1.0], 1e9)
    assert sends == 16 + 6
    assert counts == (3, 2)  # chunk 0: 8 forwards, 5 backwards; chunk 1: 8 and 6


def test_interleaved_memory_grows_with_the_microbatches_and_1f1b_does_not():
    def peak(vpp: int, gbs: int) -> float:
        plan = ParallelPlan(pp=2, vpp=vpp, schedule="interleaved" if vpp > 1 else "1f1b")
        job = TrainingJob(seq_length=128, global_batch_size=gbs, precision="fp32")
        return executor_memory_per_stage(TINY, job, plan)[0].total_bytes

    assert peak(1, 16) == peak(1, 8)
    assert peak(2, 16) > peak(2, 8) > peak(2, 4)


def test_one_microbatch_step_counts_activations_or_gradients_never_both():
    job = TrainingJob(seq_length=128, global_batch_size=4, precision="fp32")
    (alone,) = executor_memory_per_stage(TINY, job, ParallelPlan(micro_batch_size=4))
    (several,) = executor_memory_per_stage(TINY, job, ParallelPlan(micro_batch_size=2))
    assert alone.gradients_bytes == 0 and alone.activations_bytes > 0
    assert several.gradients_bytes == several.weights_bytes
    short = TrainingJob(seq_length=8, global_batch_size=1, precision="fp32")
    (tiny_acts,) = executor_memory_per_stage(TINY, short, ParallelPlan())
    assert tiny_acts.activations_bytes == 0 and tiny_acts.gradients_bytes > 0
