"""`Engine`: one training step of a `specs.PlanBundle` on this rank.

`Engine.build` composes the pieces in the order torchtitan applies them, each step
needing the previous one:
1. check the bundle against what the executor builds (SpecError with a fix otherwise);
2. build this rank's pipeline chunks (`executor.pipeline.rank_chunks`) with
   context-parallel attention when cp > 1, and seed their weights by full-model name;
3. tensor/sequence parallelism (DTensor plans must see plain modules);
4. precision (fp8 swaps linears) and recompute (checkpoint groups);
5. data parallelism (FSDP2 or DDP wraps the parallelized modules; which one, and FSDP2's
   ``reshard_after_forward``, is `specs.data_parallel.fsdp2_reshard_after_forward`'s
   choice: the distributed optimizer and Megatron-FSDP's sharding strategies);
6. the pipeline schedule over the wrapped chunks, when pp > 1;
7. AdamW over every local parameter, one group per device mesh (foreach kernels need
   tensors of one kind).

`Engine.train_step` runs every micro-batch of this data-parallel rank's share of the global
batch (the pipeline schedule, or gradient accumulation when pp = 1), finishes the gradient
reductions, steps AdamW and zeroes the gradients. The loss it returns is the mean
next-token cross entropy over the global batch, the same on every rank. No gradient
clipping is applied.

Named ranges (``torch.profiler.record_function``): ``paraplan/forward mb{m} c{c}`` (forward
and loss of micro-batch m on chunk c) and ``paraplan/backward mb{m} c{c}``; with pipelining
these come from `executor.pipeline.NamedPipelineStage` (see there for what they capture);
``paraplan/grad_sync`` around the reductions that run after the backward (DDP and FSDP2
reduce inside the last backward range instead); ``paraplan/optimizer`` around the step.

Plan switches the executor does not vary: ``overlap_grad_reduce`` (DDP and FSDP2 always
overlap their reductions with the backward; the tp > 1 bucketed path never does),
``overlap_param_gather`` (FSDP2 always prefetches the next all-gather), ``tp_comm_overlap``
(needs Transformer Engine's userbuffers) and ``cp_comm_type`` (always the all-gather).
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.tensor import DTensor
from torch.nn.parallel import DistributedDataParallel
from torch.profiler import record_function

from executor.context import ParallelContext
from executor.context_parallel import ContextParallelAttention, SequenceLayout, zigzag_split
from executor.data_parallel import (
    GradientSync,
    apply_ddp,
    apply_fsdp,
    is_expert_parameter,
    set_gradient_sync,
)
from executor.model import (
    CausalAttentionCore,
    DecoderChunk,
    check_model_supported,
    init_parameters,
    plan_full_recompute,
)
from executor.moe import DEFAULT_AUX_LOSS_COEFF, MoE
from executor.pipeline import NamedPipelineStage, build_schedule, lm_loss, rank_chunks
from executor.precision import check_precision, forward_context, swap_linears_for_fp8
from executor.tensor_parallel import apply_tensor_parallel
from specs.bundle import PlanBundle
from specs.data_parallel import fsdp2_reshard_after_forward
from specs.errors import SpecError
from specs.finetune import executor_lora_refusal
from specs.kv_sharding import executor_kv_refusal
from specs.params import padded_vocab_size
from specs.rules import require_valid_plan


@dataclass(frozen=True, kw_only=True, slots=True)
class StepResult:
    """What one training step reports."""

    loss: float
    """Mean next-token cross entropy over the global batch (identical on every rank);
    the MoE load-balancing loss is not included."""
    num_microbatches: int
    """Micro-batches each data-parallel rank ran."""
    num_tokens: int
    """Tokens in the global batch (global_batch_size x seq_length)."""


def check_bundle(bundle: PlanBundle, ctx: ParallelContext) -> None:
    """Raise SpecError for a bundle this executor cannot run on ``ctx``: every rule of
    `specs.rules` (Megatron's validation, shared with the planner), then the limits of this
    executor (no MLA, expert TP 1, SP under TP for MoE, fp8 only with Transformer Engine on
    CUDA, no LoRA, key/value heads a multiple of tp: `specs.kv_sharding`)."""
    model, plan, job = bundle.model, bundle.plan, bundle.job
    require_valid_plan(model, bundle.cluster, job, plan)
    check_model_supported(model)
    if ctx.plan != plan:
        raise SpecError(
            f"the parallel context was built for {ctx.plan.label()} but the bundle's plan is "
            f"{plan.label()}; build the context from bundle.plan"
        )
    if model.is_moe and plan.expert_tp != 1:
        raise SpecError(
            f"expert tensor parallelism (etp={plan.expert_tp}) is not supported by the "
            "executor; set etp=1 (experts are then sharded over the expert-parallel group only)"
        )
    if model.is_moe and plan.tp > 1 and not plan.sequence_parallel:
        raise SpecError(
            f"MoE layers with tp ({plan.tp}) > 1 need sequence_parallel=true, so that each TP "
            "rank routes its own tokens (Megatron requires SP with TP and EP); enable it"
        )
    check_precision(job.precision, ctx.device, plan.tp)
    refusal = executor_lora_refusal(job.lora) or executor_kv_refusal(
        model, plan.tp, "paraplan's executor"
    )
    if refusal is not None:
        raise SpecError(refusal)


def _build_chunks(bundle: PlanBundle, ctx: ParallelContext, seed: int) -> list[DecoderChunk]:
    """This rank's chunks, seeded, before any parallel wrapping."""
    model, plan = bundle.model, bundle.plan
    layout, core = None, CausalAttentionCore
    if plan.cp > 1:
        layout = SequenceLayout.zigzag(bundle.job.seq_length, plan.cp, ctx.coords["cp"], ctx.device)
        group = ctx.group("cp")

        def core() -> nn.Module:
            return ContextParallelAttention(group=group, layout=layout)

    chunks = []
    for split in rank_chunks(model, plan, ctx.coords["pp"]):
        with torch.device(ctx.device):
            chunk = DecoderChunk(
                model,
                layer_ids=split.layers,
                first=split.embedding,
                last=split.loss,
                vocab=padded_vocab_size(model.vocab_size, plan.tp),
                core_factory=core,
                positions=None if layout is None else layout.positions,
                selective_recompute=plan.recompute == "selective",
                ep=(plan.ep, ctx.coords["ep"]),
            )
        init_parameters(chunk, seed=seed, num_layers=model.num_layers)
        chunks.append(chunk)
    return chunks


def _parallelize(
    chunks: list[DecoderChunk], bundle: PlanBundle, ctx: ParallelContext, *, aux_coeff: float
) -> None:
    """TP/SP, MoE groups, precision and recompute, in place."""
    plan, job = bundle.plan, bundle.job
    for chunk in chunks:
        if plan.tp > 1:
            apply_tensor_parallel(
                chunk, ctx.submesh("tp"), sequence_parallel=plan.sequence_parallel
            )
        for module in chunk.modules():
            if isinstance(module, MoE):
                module.ep_group = ctx.group("ep") if ctx.world_size > 1 else None
                module.sequence_group = ctx.group("tp_cp") if ctx.world_size > 1 else None
                module.aux_loss_coeff = aux_coeff
        if job.precision == "fp8":
            swap_linears_for_fp8(chunk)
        chunk.forward_context = forward_context(job.precision, ctx.device)
        if plan.recompute == "full":
            keys = list(chunk.layers.keys())
            chunk.full_recompute_groups = plan_full_recompute(
                keys, plan.recompute_method, plan.recompute_num_layers
            )


def _wrap_data_parallel(chunks: list[DecoderChunk], ctx: ParallelContext) -> list[nn.Module]:
    plan = ctx.plan
    if ctx.world_size == 1:
        return list(chunks)
    reshard = fsdp2_reshard_after_forward(plan)
    if reshard is not None:
        for chunk in chunks:
            apply_fsdp(chunk, ctx, reshard_after_forward=reshard)
        return list(chunks)
    if plan.tp > 1:
        return list(chunks)  # DTensor parameters: reduced by GradientSync's buckets
    return [apply_ddp(chunk, ctx) for chunk in chunks]


def _make_optimizer(parts: list[nn.Module], lr: float, weight_decay: float):
    groups: dict[object, list[nn.Parameter]] = defaultdict(list)
    for part in parts:
        for param in part.parameters():
            groups[param.device_mesh if isinstance(param, DTensor) else None].append(param)
    return torch.optim.AdamW(
        [{"params": ps} for ps in groups.values()],
        lr=lr,
        betas=(0.9, 0.95),
        eps=1e-8,
        weight_decay=weight_decay,
    )


def _count_parameters(chunks: list[DecoderChunk], ctx: ParallelContext) -> int:
    """Parameters of the whole model (padded vocabulary, tied matrix counted once)."""
    local = 0
    for chunk in chunks:
        for name, param in chunk.named_parameters():
            if name == "output.weight" and chunk.spec.tied_embeddings:
                continue  # the last stage's copy of a tied embedding
            # DTensor.numel() is the global size; experts are split over ep on top.
            local += param.numel() * (ctx.plan.ep if is_expert_parameter(name) else 1)
    total = torch.tensor([local], dtype=torch.int64, device=ctx.device)
    group = ctx.group("pp")
    if group is not None:
        dist.all_reduce(total, group=group)
    return int(total.item())


class Engine:
    """This rank's model parts, optimizer and schedule for one plan; see the module doc."""

    def __init__(
        self,
        *,
        bundle: PlanBundle,
        ctx: ParallelContext,
        chunks: list[DecoderChunk],
        model_parts: list[nn.Module],
        optimizer: torch.optim.Optimizer,
        num_parameters: int,
    ) -> None:
        self.bundle = bundle
        self.ctx = ctx
        self.chunks = chunks
        """This rank's unwrapped chunks (TP/FSDP act on them in place)."""
        self.model_parts = model_parts
        """What to checkpoint: the chunks as wrapped for data parallelism (DDP or FSDP2)."""
        self.optimizer = optimizer
        """AdamW over every local parameter (sharded state under FSDP2)."""
        self.num_parameters = num_parameters
        """Parameters of the whole model, counted over all ranks."""
        plan, job = bundle.plan, bundle.job
        self.num_microbatches = plan.num_microbatches(job.global_batch_size)
        self.grad_sync = GradientSync(
            chunks, ctx, fsdp=fsdp2_reshard_after_forward(plan) is not None
        )
        self.schedule = None
        """The pipeline schedule (pp > 1), else None (gradient accumulation)."""
        self.stages: list[NamedPipelineStage] = []
        if plan.pp > 1:
            local_seq = job.seq_length // plan.cp
            residual_seq = local_seq // plan.tp if plan.sequence_parallel else local_seq
            vocab = padded_vocab_size(bundle.model.vocab_size, plan.tp)
            self.schedule, self.stages = build_schedule(
                model_parts,
                ctx,
                num_microbatches=self.num_microbatches,
                stage_input_shape=(plan.micro_batch_size, residual_seq, bundle.model.hidden_size),
                logits_shape=(plan.micro_batch_size, local_seq, vocab),
            )

    @classmethod
    def build(
        cls,
        bundle: PlanBundle,
        ctx: ParallelContext,
        *,
        seed: int,
        learning_rate: float = 3e-4,
        weight_decay: float = 0.0,
        aux_loss_coeff: float = DEFAULT_AUX_LOSS_COEFF,
    ) -> Engine:
        """Build this rank's part of the model for ``bundle`` (collective over all ranks)."""
        check_bundle(bundle, ctx)
        chunks = _build_chunks(bundle, ctx, seed)
        _parallelize(chunks, bundle, ctx, aux_coeff=aux_loss_coeff)
        parts = _wrap_data_parallel(chunks, ctx)
        return cls(
            bundle=bundle,
            ctx=ctx,
            chunks=chunks,
            model_parts=parts,
            optimizer=_make_optimizer(parts, learning_rate, weight_decay),
            num_parameters=_count_parameters(chunks, ctx),
        )

    # ---- one step ----------------------------------------------------------------

    def train_step(self, tokens: torch.Tensor) -> StepResult:
        """Forward, backward, gradient reduction and AdamW step on this rank's share of the
        global batch: ``tokens`` of shape (global_batch / dp, seq_length + 1)."""
        loss = self.forward_backward(tokens)
        self.optimizer_step()
        job = self.bundle.job
        return StepResult(
            loss=loss,
            num_microbatches=self.num_microbatches,
            num_tokens=job.global_batch_size * job.seq_length,
        )

    def forward_backward(self, tokens: torch.Tensor) -> float:
        """Every micro-batch's forward and backward plus the gradient reductions; returns
        the global mean loss. Gradients are left in ``.grad`` for inspection."""
        inputs, targets = self._split_tokens(tokens)
        pipelined = self.schedule is not None
        for chunk in self.chunks:
            for module in chunk.modules():
                if isinstance(module, MoE):
                    # The schedule divides gradients by the micro-batch count itself.
                    divisor = 1 if pipelined else self.num_microbatches
                    module.aux_grad_scale = self.ctx.size("cp") / divisor
        if pipelined:
            local_loss = self._run_pipeline(inputs, targets)
        else:
            local_loss = self._run_accumulation(inputs, targets)
        with record_function("paraplan/grad_sync"):
            self.grad_sync.finish()
        return self._global_loss(local_loss)

    def optimizer_step(self) -> None:
        """AdamW step, then drop the gradients."""
        with record_function("paraplan/optimizer"):
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)

    # ---- pieces --------------------------------------------------------------------

    def _split_tokens(self, tokens: torch.Tensor):
        plan, job = self.bundle.plan, self.bundle.job
        expected = (job.global_batch_size // plan.dp, job.seq_length + 1)
        if tuple(tokens.shape) != expected:
            raise SpecError(
                f"train_step expects this data-parallel rank's tokens of shape (global_batch / "
                f"dp, seq_length + 1) = {expected}, got {tuple(tokens.shape)}"
            )
        tokens = tokens.to(self.ctx.device)
        inputs, targets = tokens[:, :-1], tokens[:, 1:]  # (B, S) each
        if plan.cp > 1:
            cp_rank = self.ctx.coords["cp"]
            inputs = zigzag_split(inputs, plan.cp, cp_rank)  # (B, S / cp)
            targets = zigzag_split(targets, plan.cp, cp_rank)
        return inputs.contiguous(), targets.contiguous()

    def _run_accumulation(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Gradient accumulation over micro-batches (pp = 1), reducing on the last one."""
        (part,) = self.model_parts
        mbs, count = self.bundle.plan.micro_batch_size, self.num_microbatches
        total = torch.zeros((), device=self.ctx.device)
        for m in range(count):
            last = m == count - 1
            set_gradient_sync(self.model_parts, last)
            no_sync = isinstance(part, DistributedDataParallel) and not last
            with part.no_sync() if no_sync else contextlib.nullcontext():
                with record_function(f"paraplan/forward mb{m} c0"):
                    rows = slice(m * mbs, (m + 1) * mbs)
                    loss = lm_loss(part(inputs[rows]), targets[rows])
                with record_function(f"paraplan/backward mb{m} c0"):
                    (loss / count).backward()
            total += loss.detach()
        return total / count

    def _run_pipeline(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """One pipeline schedule step; the mean micro-batch loss on the last stage, else 0."""
        assert self.schedule is not None
        first = any(stage.is_first for stage in self.stages)
        last = any(stage.is_last for stage in self.stages)
        losses: list[torch.Tensor] = []
        args = (inputs,) if first else ()
        kwargs = {"target": targets, "losses": losses} if last else {}
        self.schedule.step(*args, return_outputs=False, **kwargs)
        if not last:
            return torch.zeros((), device=self.ctx.device)
        return torch.stack([loss.detach() for loss in losses]).mean()

    def _global_loss(self, local_loss: torch.Tensor) -> float:
        """Mean over the global batch: average of the last stage's per-rank means (equal
        token counts per dp·cp rank; tp ranks hold the same value)."""
        if self.ctx.world_size == 1:
            return float(local_loss)
        plan = self.bundle.plan
        last_stage = self.ctx.coords["pp"] == plan.pp - 1
        share = local_loss.detach().float() / (plan.dp * plan.cp * plan.tp)
        value = share if last_stage else torch.zeros_like(share)
        value = value.reshape(1).clone()
        dist.all_reduce(value)
        return float(value.item())
