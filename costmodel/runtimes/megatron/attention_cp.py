"""Context-parallel work of the attention block on one rank (`attention_costs.attention_block`):
the kernels one rank runs per sequence under ring context parallelism
(`cp_attention_steps`), the merges of their partial results (`cp_step_merge_s`) and the
K/V exchange (`cp_exchange`).

CP (`cp_comm_type`): ``p2p`` rotates K/V chunks around the ring in cp-1 steps under the
attention kernel, exposed only beyond the attention time; backward moves K/V and dK/dV
(twice the bytes). ``all_gather`` gathers K/V before attention (and reduce-scatters
dK/dV in backward), all exposed.
"""

from __future__ import annotations

from costmodel import compute as ops
from costmodel.collectives import collective_time_s, ring_exchange_time_s
from costmodel.passes import ZERO, PassCost
from costmodel.runtimes.megatron.layer_shape import LayerShape
from costmodel.topology import GroupPlacement
from profiles.schema import HardwareProfile
from specs.plan import ParallelPlan


def cp_attention_steps(plan: ParallelPlan, seq: int) -> tuple[tuple[float, int], ...]:
    """(share of the rank's causal attention work, K/V length of its kernel) per kind of
    fused-attention kernel one rank runs for one sequence of length ``seq``.

    Without context parallelism (or with the all-gather exchange, one kernel over the
    gathered K/V): one kernel, indexed by s/cp. Ring (``p2p``) context parallelism with the
    causal load balance of Transformer Engine's `AttnFuncWithCPAndKVP2P`
    (`transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py`):
    each rank holds chunks r and 2·cp-1-r of 2·cp chunks (s/cp tokens in all) and runs one
    kernel per ring step, every step the same work. Step 0 is causal over its own K/V
    (length s/cp); of the other cp-1 steps, those whose K/V come from an earlier rank attend
    all local queries to the first half of that K/V (length s/(2·cp)), the others attend
    the second local half of the queries to all of it (length s/cp); over the ranks, half
    of the steps are of each kind. Each kernel's throughput is read at its K/V length
    (`costmodel.attention_core.attention_core_time_s`), so short chunks run at the curve's lower
    rates.
    """
    cp = plan.cp
    if cp < 2 or plan.cp_comm_type != "p2p":
        return ((1.0, max(seq // cp, 1)),)
    rest = (cp - 1) / cp
    return (
        (1 / cp + rest / 2, max(seq // cp, 1)),
        (rest / 2, max(seq // (2 * cp), 1)),
    )


def cp_step_merge_s(
    profile: HardwareProfile, plan: ParallelPlan, x: LayerShape, q_width: float, kv_width: float
) -> tuple[float, float]:
    """Memory-bound merges of the per-step partial results of ring (``p2p``) context
    parallelism (forward, backward), in seconds.

    Transformer Engine's `AttnFuncWithCPAndKVP2P`
    (`transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py`) runs
    the attention of the local queries against each of the cp K/V chunks as a separate
    kernel and, after each step, merges the step's partial output into the running output
    with the log-sum-exp correction (`flash_attn_fwd_out_correction`: read the step output
    and the running output, write the running output: 3·T·q·e bytes per step). Backward
    accumulates each step's dQ into dQ (3·T·q·e) and each step's dK/dV into the dK/dV that
    travels the ring (3·T·2·kv·e) per step. T = b·s/cp tokens, q and kv the per-rank query
    and key/value widths, e the activation element size. The all-gather variant computes
    one attention over the gathered K/V and has no merges.
    """
    if plan.cp < 2 or plan.cp_comm_type != "p2p":
        return 0.0, 0.0
    step_fwd_bytes = 3 * x.tokens * q_width * x.elem
    step_bwd_bytes = 3 * x.tokens * (q_width + 2 * kv_width) * x.elem
    return (
        plan.cp * ops.memory_bound_time_s(profile, step_fwd_bytes),
        plan.cp * ops.memory_bound_time_s(profile, step_bwd_bytes),
    )


def cp_exchange(
    profile: HardwareProfile,
    plan: ParallelPlan,
    x: LayerShape,
    kv_width: float,
    group: GroupPlacement,
    core: dict[str, float],
) -> tuple[PassCost, PassCost]:
    """Context-parallel K/V exchange (forward, backward).

    ``p2p``: Transformer Engine's `AttnFuncWithCPAndKVP2P` runs cp attention steps, one
    per K/V chunk; the send of the next chunk runs under the current step's attention, and
    the next step waits for it. Each of the cp - 1 sends is therefore hidden only by one
    step's attention (a cp-th of the core time), not by the whole attention."""
    if plan.cp < 2:
        return ZERO, ZERO
    chunk = 2 * x.tokens * kv_width * x.elem  # K and V of this rank's tokens
    if plan.cp_comm_type == "p2p":
        fwd = ring_exchange_time_s(profile, chunk, plan.cp - 1, group)
        bwd = ring_exchange_time_s(profile, 2 * chunk, plan.cp - 1, group)
        fwd_bytes, bwd_bytes = (plan.cp - 1) * chunk, 2 * (plan.cp - 1) * chunk
        steps = plan.cp - 1
        fwd_exposed = steps * max(0.0, fwd / steps - core["forward"] / plan.cp)
        bwd_exposed = steps * max(0.0, bwd / steps - core["backward"] / plan.cp)
    else:
        total = plan.cp * chunk
        fwd = collective_time_s(profile, "all_gather", total, group)
        bwd = fwd + collective_time_s(profile, "reduce_scatter", total, group)
        fwd_bytes, bwd_bytes = total, 2 * total
        fwd_exposed, bwd_exposed = fwd, bwd
    return (
        PassCost(cp_s=fwd, cp_exposed_s=fwd_exposed, cp_bytes=fwd_bytes),
        PassCost(cp_s=bwd, cp_exposed_s=bwd_exposed, cp_bytes=bwd_bytes),
    )
