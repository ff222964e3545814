"""Host launches of one MoE layer pass that do not repeat per expert under Megatron-core's
flex token dispatcher with the HybridEP backend (``--moe-token-dispatcher-type flex``,
``--moe-flex-dispatcher-backend hybridep``), where the alltoall dispatcher's count
(`costmodel.runtimes.megatron.moe_launches.FIXED_LAUNCHES`) does not apply.

Sources: Megatron-LM ``core_r0.16.0`` `megatron/core/transformer/moe/token_dispatcher.py`
(``MoEFlexTokenDispatcher``, ``_HybridEPManager``), `fused_a2a.py` (``HybridEPDispatch``,
``HybridEPCombine``), `experts.py` (``TEGroupedMLP.forward``: ``tokens_per_expert.tolist()``);
DeepEP hybrid-ep `deep_ep/hybrid_ep_buffer.py` (``dispatch_with_permute``: the routing-map
``all_gather_into_tensor`` and ``metadata_preprocessing`` before the dispatch),
`csrc/hybrid_ep/hybrid_ep.cu` (``HybridEPBuffer::dispatch_with_permute``,
``combine_with_unpermute``) and `csrc/hybrid_ep/executor/executor.cu`
(``metadata_preprocess_core``, ``dispatch_core``, ``dispatch_postprocess``,
``combine_preprocess``).

The alltoall dispatcher runs the dispatch metadata (token counts, split sums, the count
all-gather, five device-to-host copies), two permutations, three all-to-alls and their
inverses as separate PyTorch operators. HybridEP fuses the permutation into the exchange:

forward (`FLEX_FIXED_LAUNCHES`)
  router (the shared `moe_launches.ROUTER_LAUNCHES`: gating GEMM, fused top-k and score
  function, fused aux loss): 4; ``dispatch_preprocess`` (the routing map and probs
  expanded to the TP x EP group and made contiguous): 2; ``dispatch_with_permute``: the
  routing-map all-gather and the metadata preprocessing kernel, the copy of the dispatched
  token count to the host (``.item()``, the stream synchronization of a dropless run), the
  dispatch kernel, the permute preprocessing kernel, the per-expert token sum and its copy
  to the host, the permute kernel: 8; the dispatcher's ``tokens_per_expert.sum()``: 1; the
  experts' split sizes copied to the host (``tolist``): 1; the fused weighted activation: 2;
  ``combine_with_unpermute`` (the dispatched token count read for the unpermute, unpermute,
  combine kernel): 3. Total 21, of which 8 run before the synchronization
  (`FLEX_PRE_SYNC_LAUNCHES`: router, preprocessing, all-gather, metadata kernel).
backward (autograd)
  the router's and the preprocessing's gradients (4 + 2), ``HybridEPCombine.backward``
  (``dispatch_with_permute`` with the saved handle: token-count copy, dispatch kernel,
  permute kernel: 3), the activation's gradient (2), ``HybridEPDispatch.backward``
  (``combine_with_unpermute``: 3). Total 14.

The ``moe_preprocess`` CUDA graph scope captures ``dispatch_preprocess`` only
(`FLEX_PREPROCESS_LAUNCHES`); HybridEP's metadata kernels run inside the dispatch, outside
the scope. DeepEP (the other flex backend, ``_DeepepManager``) has the same shape: a fused
dispatch and combine with Megatron's permutation on the receiving side; it is counted alike.
"""

from __future__ import annotations

FLEX_FIXED_LAUNCHES = {"forward": 21, "backward": 14}
"""Launches of one MoE layer pass under the flex dispatcher that do not repeat per local
expert (module docstring)."""

FLEX_PREPROCESS_LAUNCHES = 2
"""Launches of ``MoEFlexTokenDispatcher.dispatch_preprocess`` (the two ``contiguous``
copies of the expanded routing map and probs), captured by the ``moe_preprocess`` scope."""

FLEX_PRE_SYNC_LAUNCHES = 8
"""Forward launches of the flex dispatcher issued before the dropless synchronization on
the dispatched token count: router (4), ``dispatch_preprocess`` (2), HybridEP's routing-map
all-gather and metadata preprocessing kernel (2); the copy of the dispatched token count to
the host that follows is the synchronization."""


def uses_flex_launches(dispatcher: str) -> bool:
    """True when ``dispatcher`` (`ExecutionOptions.moe_dispatcher`) is priced with the flex
    dispatcher's launch counts rather than the alltoall dispatcher's."""
    return dispatcher == "flex"
