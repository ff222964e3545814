"""Device memory that per-layer CUDA graphs (`ExecutionOptions.cuda_graph_scopes`) hold
beyond what the eager run holds.

Where each implementation allocates:

- Transformer Engine (Megatron-core ``cuda_graph_impl="transformer_engine"``:
  megatron/core/transformer/cuda_graphs.py, `TECudaGraphHelper`; TE
  transformer_engine/pytorch/graph.py, `_make_graphed_callables`). One graph pair per
  (captured callable, microbatch) of the step, every capture in one private pool
  (``graph_pool_handle``) in the schedule's order (``_order``). The static inputs are the
  sample arguments `TECudaGraphHelper._get_sample_arguments` allocates per
  (layer, microbatch); a forward reuses the buffers of a microbatch whose backward has run,
  so a chunk holds one set per in-flight microbatch. With TE >= 2.7 Megatron-core passes
  ``_reuse_graph_input_output_buffers``: the static outputs and the static gradient inputs
  are weak references once their backward graph is captured (their blocks return to the
  pool), and the static gradient outputs are one set per tensor signature.
- Megatron-core local (``cuda_graph_impl="local"``, `CudaGraphManager`, `_CudaGraphRunner`;
  core >= 0.16): one global pool (``CudaGraphManager.global_mempool``); at pp 1 one runner
  per layer serves every microbatch, at pp > 1 one runner per (layer, microbatch); input
  and output buffers are weak references where TE's ``make_weak_ref`` is available
  (`_weakref_forward_buffers`, `create_bwd_graph`).
- PyTorch (torch/cuda/graphs.py, ``torch.cuda.graph(pool=...)``; CUDACachingAllocator
  private pools): blocks a capture allocates stay in the private pool for the graph's
  lifetime; a block freed during capture is reused only by later captures into that pool.

What persists beyond the eager run, per rank:

- The captured callable's static input is a copy: Graphed.forward (TE) and
  `_CudagraphReplayNode.forward` (local) copy the caller's tensor into the static buffer,
  and the captured layer saves the static buffer. Inside a chunk the caller's tensor is the
  previous graph's static output (weak-referenced, its block reused in the pool) or, at
  the chunk's first layer, the chunk's input. On a chunk that receives its input from the
  previous pipeline stage, the schedule keeps that received tensor for the backward
  (``input_tensors`` in megatron/core/pipeline_parallel/schedules.py, whose ``.grad`` it
  sends back), so each in-flight microbatch of such a chunk holds the chunk input twice:
  [s/cp, b, h] (/tp with sequence parallelism) more per in-flight microbatch
  (`graph_input_copy_bytes`). The first stage's first chunk takes the embedding output,
  which is freed after the copy. This applies where the chunk's first layer's first part is
  captured (`captures_layer_input`).
- Negligible, not priced: the static gradient outputs (one set per signature, one
  [s/cp, b, h] tensor: 16 MiB at s 8192, b 1, h 8192, tp 8 with SP) and the static gradient
  input of a chunk's last backward; the reserved pool's transient region (the largest
  captured callable's forward or backward working set, which the pool reuses between
  graphs but which eager allocations cannot take): the memory model has no backward
  working-set term for runs without recompute to size it with.
- ``full_iteration`` (megatron/core/full_cuda_graph.py, `FullCudaGraphWrapper`): one graph
  of the whole forward-backward; pipeline buffers and activations are allocated inside the
  graph's pool as in the eager schedule. `StaticBufferLoader` keeps every microbatch's
  dataloader output (tokens, labels, position ids int64, loss mask fp32: 28 bytes per
  token) on the ranks that read data: 28·b·s·m bytes, 14.7 MB at b 1, s 4096, m 128;
  not priced.
- Megatron-core local, core <= 0.15 (`CudaGraphManager.fwd_mempools`): at pp > 1 without
  ``cuda_graph_use_single_mempool`` every (chunk, microbatch) forward has its own pool,
  which keeps that microbatch's saved activations reserved after its backward. The
  options do not name the implementation, and `paraplan export` writes Transformer
  Engine graphs for per-layer scopes, so this is not priced.
"""

from __future__ import annotations

from costmodel.activation_shard import activation_element_bytes
from costmodel.activations import in_flight_chunk_counts
from costmodel.cuda_graph_rules import per_layer_graphs
from costmodel.schedules import chunk_layers
from specs.job import TrainingJob
from specs.layer_kinds import LayerKind
from specs.model import ModelSpec
from specs.plan import ParallelPlan

_MIXER_SCOPES = {"attention": "attn", "mamba": "mamba"}
"""`ExecutionOptions.cuda_graph_scopes` name capturing each token mixer (Megatron-core
``CudaGraphModule``: ``attn`` self-attention with its input norm, ``mamba`` a Mamba-2
layer); a gated DeltaNet is captured only as a whole layer."""
_MLP_SCOPES = {"dense": ("mlp",), "moe": ("moe", "moe_router")}
"""Scopes capturing a layer's feed-forward part from its pre-norm (``moe_router`` captures
the pre-MLP norm and the router, `TransformerLayer._forward_mlp_router`)."""


def captures_layer_input(kind: LayerKind, scopes: frozenset[str]) -> bool:
    """True when ``scopes`` capture the first part of a layer of ``kind``, so the layer's
    input is copied into a graph's static input buffer: ``layer`` (the whole layer), or the
    scope of its token mixer, or, for a layer without one (a hybrid model's ``-`` and
    ``E``), the scope of its feed-forward part."""
    if "layer" in scopes:
        return True
    if kind.mixer != "none":
        return _MIXER_SCOPES.get(kind.mixer) in scopes
    return any(scope in scopes for scope in _MLP_SCOPES.get(kind.mlp, ()))


def graph_input_copy_bytes(
    model: ModelSpec,
    job: TrainingJob,
    plan: ParallelPlan,
    pp_rank: int,
    scopes: frozenset[str],
) -> float:
    """Bytes one rank of stage ``pp_rank`` holds in per-layer CUDA graphs' static input
    copies of its chunks' received inputs (module docstring): e·(b·s/cp)·h/sp for every
    in-flight microbatch (`costmodel.activations.in_flight_chunk_counts`) of every chunk
    that receives its input from another stage (all chunks of stages > 0, chunks > 0 of
    stage 0) and whose first layer's first part ``scopes`` capture (`captures_layer_input`);
    e the stored activation size (`activation_element_bytes`), sp = tp with sequence
    parallelism. 0 without per-layer graphs (`costmodel.cuda_graph_rules.per_layer_graphs`)
    and at pp 1.
    """
    if plan.pp == 1 or not per_layer_graphs(scopes):
        return 0.0
    sp = plan.tp if plan.sequence_parallel else 1
    tokens = plan.micro_batch_size * job.seq_length / plan.cp
    boundary_bytes = activation_element_bytes(job) * tokens * model.hidden_size / sp
    counts = in_flight_chunk_counts(
        plan.pp, plan.vpp, pp_rank, plan.num_microbatches(job.global_batch_size)
    )
    kinds = model.layer_kinds()
    copies = 0
    for chunk, count in enumerate(counts):
        layers = chunk_layers(model, plan, pp_rank, chunk)
        receives = pp_rank > 0 or chunk > 0
        if receives and len(layers) and captures_layer_input(kinds[layers[0]], scopes):
            copies += count
    return copies * boundary_bytes
