"""Tensor and sequence parallelism with DTensor ``parallelize_module`` plans.

Megatron's layout (megatron-facts.md §6), written as torch parallel styles:
- attention: wq, wk, wv column-parallel (each rank holds H/tp query and G/tp key/value
  heads), wo row-parallel; MLP: w1 (and w3) column-parallel, w2 row-parallel. Each block
  thus needs one all-reduce after attention and one after the MLP (forward), or with
  sequence parallelism an all-gather before and a reduce-scatter after each.
- token embedding row-parallel over the vocabulary; output layer column-parallel over
  the vocabulary with its logits gathered (Replicate), so the cross entropy runs on full
  logits and matches the single-process loss exactly. Loss parallelism is not used.
- sequence parallelism (``plan.sequence_parallel``): the residual stream between blocks is
  sharded along the sequence dim (Shard(1)); norms run on the shard (``SequenceParallel``,
  whose replicated weights get their gradient all-reduced over TP automatically).
- MoE layers need sequence parallelism under TP, so that every TP rank routes different
  tokens (Megatron's docs require it with EP): the layer takes its local sequence shard,
  the router is a ``SequenceParallel`` module, routed experts are not TP-sharded (expert
  TP size 1) and a shared expert is sharded like the dense MLP.

The residual stream stays a plain local tensor between modules (row-parallel outputs use
``use_local_output``), so pipeline stages exchange ordinary tensors.
"""

from __future__ import annotations

from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    ParallelStyle,
    PrepareModuleInput,
    PrepareModuleOutput,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)

from executor.model import MLP, DecoderChunk, TransformerBlock
from executor.moe import MoE
from specs.errors import SpecError


def _mlp_plan(prefix: str, mlp: MLP, residual, sequence_parallel: bool):
    plan: dict[str, ParallelStyle] = {
        f"{prefix}.w1": ColwiseParallel(),
        f"{prefix}.w2": RowwiseParallel(output_layouts=residual),
    }
    if mlp.w3 is not None:
        plan[f"{prefix}.w3"] = ColwiseParallel()
    if sequence_parallel:
        plan[prefix] = PrepareModuleInput(
            input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)
        )
    return plan


def _moe_plan(prefix: str, moe: MoE, sequence_parallel: bool) -> dict[str, ParallelStyle]:
    if not sequence_parallel:
        raise SpecError(
            "MoE layers with tp > 1 need sequence_parallel=true, so that each TP rank routes "
            "its own tokens (Megatron requires SP with TP and EP); enable sequence_parallel"
        )
    plan: dict[str, ParallelStyle] = {
        prefix: PrepareModuleInput(
            input_layouts=(Shard(1),), desired_input_layouts=(Shard(1),), use_local_output=True
        ),
        f"{prefix}.router": SequenceParallel(use_local_output=True),
    }
    if isinstance(moe.shared_expert, MLP):
        plan.update(_mlp_plan(f"{prefix}.shared_expert", moe.shared_expert, Shard(1), True))
    return plan


def _block_plan(prefix: str, block: TransformerBlock, sequence_parallel: bool):
    residual = Shard(1) if sequence_parallel else Replicate()
    plan: dict[str, ParallelStyle] = {
        f"{prefix}.attention.wq": ColwiseParallel(),
        f"{prefix}.attention.wk": ColwiseParallel(),
        f"{prefix}.attention.wv": ColwiseParallel(),
        f"{prefix}.attention.wo": RowwiseParallel(output_layouts=residual),
    }
    if sequence_parallel:
        plan[f"{prefix}.attention_norm"] = SequenceParallel()
        plan[f"{prefix}.ffn_norm"] = SequenceParallel()
        plan[f"{prefix}.attention"] = PrepareModuleInput(
            input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)
        )
    ffn = block.feed_forward
    if isinstance(ffn, MoE):
        plan.update(_moe_plan(f"{prefix}.feed_forward", ffn, sequence_parallel))
    elif isinstance(ffn, MLP):
        plan.update(_mlp_plan(f"{prefix}.feed_forward", ffn, residual, sequence_parallel))
    return plan


def _ends_plan(chunk: DecoderChunk, sequence_parallel: bool) -> dict[str, ParallelStyle]:
    residual = Shard(1) if sequence_parallel else Replicate()
    plan: dict[str, ParallelStyle] = {}
    if chunk.embedding is not None:
        if chunk.embedding.position is None:
            plan["embedding.token"] = RowwiseParallel(
                input_layouts=Replicate(), output_layouts=residual
            )
        else:
            # The position table is added to full sequences, then the sum is scattered;
            # the scatter's backward all-gathers, so the table's gradient is whole on every rank.
            plan["embedding.token"] = RowwiseParallel(
                input_layouts=Replicate(), output_layouts=Replicate()
            )
            if sequence_parallel:
                plan["embedding"] = PrepareModuleOutput(
                    output_layouts=Replicate(), desired_output_layouts=Shard(1)
                )
    if chunk.output is not None:
        if sequence_parallel:
            plan["norm"] = SequenceParallel()
        plan["output"] = ColwiseParallel(input_layouts=residual, output_layouts=Replicate())
    return plan


def apply_tensor_parallel(
    chunk: DecoderChunk, tp_mesh: DeviceMesh, *, sequence_parallel: bool
) -> None:
    """Shard ``chunk`` in place over ``tp_mesh`` (TP, plus SP when asked)."""
    plan = _ends_plan(chunk, sequence_parallel)
    for key, block in chunk.layers.items():
        assert isinstance(block, TransformerBlock)
        plan.update(_block_plan(f"layers.{key}", block, sequence_parallel))
    tied = chunk.embedding is not None and chunk.output is not None and chunk.spec.tied_embeddings
    parallelize_module(chunk, tp_mesh, plan)
    if tied:
        # Both styles shard the matrix along the vocabulary (Shard(0)): share one DTensor.
        chunk.tie_output()
