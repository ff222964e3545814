"""What one multi-token-prediction depth keeps for its backward outside its layers, per
microbatch on one rank, tensor by tensor (`mtp_depth_tensors`); the depth's layers keep what
a decoder layer of their kind keeps (`costmodel.layer_activations`), and
`costmodel.activations` adds both up per stage, for the simulated estimate and the screen
alike.

Source: Megatron-core ``MultiTokenPredictionLayer.forward`` and
``MultiTokenPredictionBlock.forward`` (``megatron/core/transformer/
multi_token_prediction.py``), ``process_mtp_loss`` (same file) and ``GPTModel._postprocess``
(``megatron/core/models/gpt/gpt_model.py``), NVIDIA/Megatron-LM d98e8a64. With T = b·s/cp
tokens of the rank, T' = T/tp with sequence parallelism (T without), e the activation
element size:

- ``mtp_embedding``: ``_get_embeddings`` runs the rolled token ids through the model's word
  embedding again: the int64 ids ``F.embedding`` saves and the embedding dropout mask, as
  the first stage's embedding keeps them (`costmodel.vocab_activations.
  embedding_microbatch_bytes`).
- ``enorm_input``: ``enorm`` saves its input, the embedding output, e·T'·h.
- ``hnorm_input``: ``hnorm`` saves its input, the hidden states the depth receives (the
  main model's final-norm output, or the previous depth's output), e·T'·h: a tensor of its
  own, as the output layers save the copy ``torch.cat`` makes of every depth's output.
- ``eh_proj_input``: ``torch.cat`` of the two norm outputs saves nothing; ``eh_proj``
  (Transformer Engine ``Linear``, column-parallel) saves the [T', 2h] concatenation for its
  weight gradient, the rank's rows before the sequence-parallel all-gather: the quantized
  copy (1 byte) in an fp8 job, as every TE linear's saved input
  (`costmodel.activation_shard.ActivationShard.gemm_input_bytes`); 2 bytes in an nvfp4 job,
  whose depth enters no fp4 context (``_proj_and_transformer_layer``, "currently ignoring
  FP4 in MTP layers", as `costmodel.runtimes.megatron.mtp_costs` prices the GEMM); none
  under LoRA (the frozen ``eh_proj`` saves no input: ``backward_needs_input`` needs
  ``weight.requires_grad``).
- ``eh_proj_gathered_output``: with sequence parallelism ``eh_proj``'s output is gathered
  along h into [T, h] (``gather_from_tensor_model_parallel_region``) and
  ``scatter_to_sequence_parallel_region`` hands the depth's first layer a slice of it
  (``_split_along_first_dim``: ``input_[a:b].contiguous()`` of a contiguous tensor is the
  same storage); the pre-norm of that layer saves the slice, which keeps the whole [T, h]
  storage alive: e·T·h·(1 - 1/tp) beyond the layer input that
  `costmodel.layer_activations` counts. None without sequence parallelism, where the
  gathered tensor is the layer input itself.
- ``mtp_final_norm_input``, ``mtp_output_layer_input``, ``mtp_logits``: the depth's
  ``final_layernorm`` saves its input; ``process_mtp_loss`` runs the shared output layer,
  which saves its input, and the loss, which saves its view of the logits, per depth
  (`costmodel.vocab_activations.output_layer_bytes`; the loss's transient logits bytes are
  the stage's, once).

Full recompute (``recompute_granularity == "full"``) with the ``uniform`` method checkpoints
``_proj_and_transformer_layer`` (``_checkpointed_forward``; the ``block`` method runs it
without a checkpoint and the depth keeps every tensor, as without recompute: the one
decision is `specs.plan.ParallelPlan.checkpoints_mtp_depths`): the checkpoint saves its
inputs, the hidden states and the embedding output, which are the ``hnorm`` and ``enorm``
inputs; the embedding and the output layer and loss run outside it
(`MTP_CHECKPOINT_TENSORS`). The rest (``eh_proj``'s input, the gathered output, the final
norm's input, the layers' tensors) is rebuilt in the backward. Not counted, as for the
decoder's norms: the fp32 statistics of the norms (4 bytes per row) and the per-token
loss scalars (4·T bytes).

Units: bytes per rank.
"""

from __future__ import annotations

from costmodel.activation_shard import activation_shard
from costmodel.vocab_activations import (
    CrossEntropyFusion,
    embedding_microbatch_bytes,
    output_layer_bytes,
)
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.plan import ParallelPlan

MTP_CHECKPOINT_TENSORS: tuple[str, ...] = (
    "mtp_embedding",
    "enorm_input",
    "hnorm_input",
    "mtp_output_layer_input",
    "mtp_logits",
)
"""The tensors of `mtp_depth_tensors` a depth keeps under full recompute (module
docstring)."""


def mtp_depth_tensors(
    model: ModelSpec,
    job: TrainingJob,
    plan: ParallelPlan,
    *,
    dropout: bool = True,
    cross_entropy: CrossEntropyFusion = "unfused",
) -> dict[str, float]:
    """Bytes one MTP depth keeps outside its layers for one microbatch, nothing recomputed,
    by tensor name (module docstring); ``dropout``: the run applies hidden dropout;
    ``cross_entropy``: the loss's implementation."""
    x = activation_shard(job, plan, dropout)
    h, n, e = model.hidden_size, x.tokens, x.element_bytes
    gemm_input_bytes = e if job.precision == "nvfp4" else x.gemm_input_bytes
    out = output_layer_bytes(model, job, plan, cross_entropy)
    return {
        "mtp_embedding": embedding_microbatch_bytes(model, job, plan, dropout),
        "enorm_input": e * n * h / x.sp,
        "hnorm_input": e * n * h / x.sp,
        "eh_proj_input": 0.0 if job.lora is not None else gemm_input_bytes * n * 2 * h / x.sp,
        "eh_proj_gathered_output": e * n * h * (1 - 1 / x.sp),
        "mtp_final_norm_input": out.final_norm_input,
        "mtp_output_layer_input": out.output_layer_input,
        "mtp_logits": out.logits,
    }
