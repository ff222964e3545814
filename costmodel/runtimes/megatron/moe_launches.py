"""Host-side kernel launches of one MoE layer pass as Megatron-core issues them, the share a
CUDA graph replays, and the floor the host puts under a layer pass.

Source: Megatron-LM `megatron/core/transformer/moe/` (`token_dispatcher.py`
`MoEAlltoAllTokenDispatcher`, `moe_layer.py` `MoELayer.preprocess`) and
megatron/core/transformer/transformer_config.py (``cuda_graph_modules``); shapes and
per-pass work in `costmodel.runtimes.megatron.moe_costs`.

Host side (`moe_host_launches`): the dropless dispatcher copies the split sizes to the host
and synchronizes the stream once per forward (``_maybe_dtoh_and_synchronize`` at
``cuda_sync_point``); TE's grouped GEMM launches one cuBLAS GEMM per expert (and, under FP8,
one quantization per expert input). The flex dispatcher fuses its permutations into the
exchange and launches fewer kernels that do not repeat per expert
(`costmodel.runtimes.megatron.moe_flex_launches`). A layer pass therefore takes at least
the host time of its launches; `host_bound_s` applies that floor. The launches come in two
kinds (`MoeLaunches`): Python-level ones, one PyTorch operator or Transformer Engine call
each (the dispatcher's, the router's, each ``GroupedLinear`` call), and the ones Transformer
Engine issues per local expert from C++ inside one call, which cost less host time each
(`ExecutionOptions.moe_host_launch_s`, `ExecutionOptions.moe_expert_launch_s`). The
per-expert launches, the FP8 quantization of the expert operands and TE's fused grouped MLP
are in `costmodel.runtimes.megatron.moe_experts`.
"""

from __future__ import annotations

from dataclasses import dataclass

from costmodel.runtimes.megatron.moe_experts import expert_launches
from costmodel.runtimes.megatron.moe_flex_launches import (
    FLEX_FIXED_LAUNCHES,
    FLEX_PRE_SYNC_LAUNCHES,
    FLEX_PREPROCESS_LAUNCHES,
    uses_flex_launches,
)

FIXED_LAUNCHES = {"forward": 28, "backward": 28}
"""Kernel launches of one MoE layer pass that do not repeat per expert, counted on the
dropless alltoall path of `MoEAlltoAllTokenDispatcher` with `--moe-router-fusion` and
`--moe-permute-fusion`: router (gating GEMM, fused top-k and score function, fused aux
loss: 4), dispatch metadata (token counts, split sums, the count all-gather, slicing, five
device-to-host copies and the event: 12), permutation 1 and 2 and their inverses, three
all-to-alls and the probs (10), the fused weighted activation (2). The backward replays the
same chain through autograd."""


@dataclass(frozen=True, kw_only=True, slots=True)
class MoeLaunches:
    """Host launches of one MoE layer pass, by kind (module docstring)."""

    python: int
    """Launches issued by one Python-level call each: the router's, the dispatcher's, each
    ``GroupedLinear`` call's, the fused grouped MLP's, ``_apply_bias``'s; priced at
    `ExecutionOptions.moe_host_launch_s`."""
    expert: int
    """Launches Transformer Engine issues from C++, one per local expert, inside a
    Python-level ``GroupedLinear`` call (the per-expert cuBLASLt GEMMs and quantizations);
    priced at `ExecutionOptions.moe_expert_launch_s`."""

    @property
    def total(self) -> int:
        """Launches of both kinds."""
        return self.python + self.expert

    def minus(self, other: MoeLaunches) -> MoeLaunches:
        """These launches less ``other`` (a captured share), kind by kind."""
        return MoeLaunches(python=self.python - other.python, expert=self.expert - other.expert)

    def host_s(self, python_s: float, expert_s: float) -> float:
        """Host seconds of these launches at ``python_s`` per Python-level launch and
        ``expert_s`` per per-expert C++ launch."""
        return self.python * python_s + self.expert * expert_s


def moe_host_launches(
    local_experts: int,
    fp8: bool,
    direction: str,
    *,
    fused_mlp: bool = False,
    dispatcher: str = "alltoall",
    biased: bool = False,
) -> MoeLaunches:
    """Kernel launches the host issues for one MoE layer pass: the dispatcher's launches
    that do not repeat per expert (`FIXED_LAUNCHES`; `moe_flex_launches.FLEX_FIXED_LAUNCHES`
    for ``flex``), Python-level, plus the experts' MLP (`moe_experts.expert_launches`: with
    TE ``GroupedLinear`` a few Python-level calls and C++ launches per local expert, and
    with ``biased`` experts ``_apply_bias``'s Python-level launches per local expert; a
    fixed few Python-level ones with the fused grouped MLP)."""
    python, expert = expert_launches(local_experts, fp8, direction, fused=fused_mlp, biased=biased)
    fixed = FLEX_FIXED_LAUNCHES if uses_flex_launches(dispatcher) else FIXED_LAUNCHES
    return MoeLaunches(python=fixed[direction] + python, expert=expert)


ROUTER_LAUNCHES = 4
"""Launches of `FIXED_LAUNCHES` in the router (gating GEMM, fused top-k and score function,
fused aux loss), captured by the ``moe_router`` CUDA graph scope
(megatron/core/transformer/transformer_config.py, ``cuda_graph_modules``)."""

PREPROCESS_LAUNCHES = 12
"""Launches of `FIXED_LAUNCHES` in the dispatch metadata (``MoELayer.preprocess``: token
counts, split sums, the count all-gather, slicing, device-to-host copies), captured by the
``moe_preprocess`` CUDA graph scope (same source; valid only with ``moe_router``)."""

WHOLE_MOE_SCOPES = frozenset(("moe", "layer", "full_iteration"))
"""CUDA graph scopes that capture a MoE layer's whole pass (``moe``: all of
``TransformerLayer._forward_mlp``; ``layer``: the transformer layer; ``full_iteration``)."""


def pre_sync_launches(dispatcher: str = "alltoall") -> int:
    """Forward launches of a dropless MoE layer issued before its stream synchronization on
    the token counts, all Python-level: the router and the dispatch metadata (`ROUTER_LAUNCHES` +
    `PREPROCESS_LAUNCHES`), or the flex dispatcher's
    (`moe_flex_launches.FLEX_PRE_SYNC_LAUNCHES`)."""
    if uses_flex_launches(dispatcher):
        return FLEX_PRE_SYNC_LAUNCHES
    return ROUTER_LAUNCHES + PREPROCESS_LAUNCHES


def captured_moe_launches(
    scopes: frozenset[str], launches: MoeLaunches, dispatcher: str = "alltoall"
) -> MoeLaunches:
    """Of a MoE layer pass's `launches`, those a CUDA graph replays (no host launch time):
    all under `WHOLE_MOE_SCOPES`, else `ROUTER_LAUNCHES` under ``moe_router`` plus
    `PREPROCESS_LAUNCHES` under ``moe_preprocess`` (Megatron-core accepts it only together
    with ``moe_router``; the flex ``dispatcher``'s preprocessing is
    `moe_flex_launches.FLEX_PREPROCESS_LAUNCHES`), all Python-level. The expert GEMMs stay
    eager: their token counts are known only after the dispatch."""
    if scopes & WHOLE_MOE_SCOPES:
        return launches
    captured = 0
    if "moe_router" in scopes:
        captured += ROUTER_LAUNCHES
        if "moe_preprocess" in scopes:
            flex = uses_flex_launches(dispatcher)
            captured += FLEX_PREPROCESS_LAUNCHES if flex else PREPROCESS_LAUNCHES
    return MoeLaunches(python=min(captured, launches.python), expert=0)


def host_bound_s(gpu_s: float, host_s: float) -> float:
    """Seconds a layer pass adds when its host launches take longer than its kernels run:
    max(0, host - GPU). The dropless dispatcher's stream synchronization empties the launch
    queue once per forward, so the host cannot bank time from earlier layers; layers of one
    kind repeat, so the same floor holds in backward once the host falls behind."""
    return max(0.0, host_s - gpu_s)
