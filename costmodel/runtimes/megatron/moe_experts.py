"""How Transformer Engine runs the routed experts of one MoE layer on one rank, beyond
their GEMMs: the FP8 quantization of the expert GEMM operands, the kernel launches that
repeat per local expert, and the host-launch floor of a forward pass that synchronizes on
the dispatched token counts.

Two implementations (`ExecutionOptions.moe_fused_grouped_mlp`):

- TE ``GroupedLinear`` (Megatron-core ``TEGroupedMLP``; TE v2.x
  `transformer_engine/pytorch/module/grouped_linear.py`): each projection quantizes its
  input with ``tex.split_quantize`` (forward) and its output gradient the same way
  (backward), one quantization kernel per expert for MXFP8 and the current-scaling
  recipes (`transformer_engine/pytorch/csrc/extensions/cast.cpp`, ``split_quantize``: only
  delayed scaling has the fused multi-tensor kernel), then ``general_grouped_gemm`` issues
  one cuBLASLt GEMM per expert, round-robin over four compute streams
  (`transformer_engine/common/gemm/cublaslt_gemm.cu`, ``multi_stream_cublas_gemm``;
  `common/util/multi_stream.cpp`, ``num_compute_streams = 4``). The expert GEMMs take
  their split sizes as a host list, so the dispatcher copies the received token counts to
  the host before them.
- TE's fused grouped MLP (TE v2.16 `transformer_engine/pytorch/ops/fused/
  forward_grouped_mlp.py`, ``ForwardGroupedMLP_CuTeGEMMSwiGLU_MXFP8``, and
  ``backward_grouped_mlp.py``): forward quantizes FC1's input with one ``group_quantize``,
  runs FC1 as one grouped GEMM whose epilogue applies the SwiGLU and writes FC2's input
  already quantized, then FC2 as one grouped GEMM; backward quantizes FC2's output
  gradient with one ``group_quantize``, runs FC2's dgrad with the SwiGLU backward and the
  quantization of FC1's output gradient in its epilogue, FC1's dgrad and the two weight
  gradients as grouped GEMMs. Split sizes stay on the device.

Quantizing one operand reads it in bf16 and writes the row-wise and column-wise FP8
copies (`costmodel.fp8_quantization.fp8_quantize_time_s`).

Host launches of ``GroupedLinear`` (`expert_launches`), in two kinds with two prices
(`ExecutionOptions.moe_host_launch_s`, `ExecutionOptions.moe_expert_launch_s`):

- Python-level, a fixed number per pass (`GROUPED_LINEAR_CALLS`,
  `GROUPED_QUANTIZE_CALLS`): each projection's ``_GroupedLinear.forward`` makes one
  ``general_grouped_gemm`` call (`transformer_engine/pytorch/cpp_extensions/gemm.py`), and
  its backward one for the dgrad and one for the wgrad; under FP8 each forward makes one
  ``_split_quantize`` call on its input and each backward one on its output gradient. Each
  call runs its Python and pybind11 layer once, whatever the number of experts, and
  ``multi_stream_cublas_gemm`` records and waits on the compute-stream events once per
  call.
- Per local expert, issued from C++ inside those calls (`UNFUSED_EXPERT_LAUNCHES`,
  `UNFUSED_EXPERT_FP8_LAUNCHES`): ``te_general_grouped_gemm``
  (`pytorch/csrc/extensions/gemm.cpp`) builds the operand wrappers and calls
  ``nvte_multi_tensor_gemm``, whose loop issues ``nvte_cublas_gemm_v2`` once per expert
  (cuBLASLt layouts, heuristic query and ``cublasLtMatmul`` each time);
  ``split_quantize`` (`pytorch/csrc/extensions/cast.cpp`) quantizes the expert slices in
  ``multi_tensor_quantize_impl``, one ``quantize`` per slice except under delayed scaling
  (one ``nvte_multi_cast_transpose``; counted per expert all the same). Megatron-core's
  ``TEGroupedMLP`` adds no per-expert Python loop around them in the unfused path except
  ``_apply_bias`` for biased experts (`megatron/core/transformer/moe/experts.py`: a
  ``torch.split`` of the FC2 output and the probs and one multiply-add per expert, Python
  level: `costmodel.runtimes.megatron.unfused_costs.EXPERT_BIAS_KERNELS_PER_EXPERT`); its
  ``tokens_per_expert.tolist()`` is the host copy the dispatcher's synchronization already
  waits for. TE's Python loops over the experts that launch nothing per microbatch (the
  per-weight ``quantize_weight`` loop, which quantizes only on the first microbatch of an
  iteration, the list comprehensions of ``general_grouped_gemm``, the per-weight
  gradient-accumulation hooks) are not counted.
"""

from __future__ import annotations

from costmodel.activation_shard import projection_saves_original_input
from costmodel.fitted_rates import token_device_s as scaled_token_device_s
from costmodel.fp8_quantization import fp8_quantize_time_s
from costmodel.memory_allowances import QuantRecipe
from costmodel.runtimes.megatron.requant_costs import saved_input_requant_s
from costmodel.runtimes.megatron.unfused_costs import EXPERT_BIAS_KERNELS_PER_EXPERT
from profiles.schema import HardwareProfile

UNFUSED_EXPERT_LAUNCHES = {"forward": 2, "backward": 4}
"""C++ launches per local expert and pass of TE ``GroupedLinear`` without FP8: one cuBLASLt
GEMM per expert for FC1 and FC2 in forward, a dgrad and a wgrad GEMM for each in backward
(``te_general_grouped_gemm``; module docstring)."""

UNFUSED_EXPERT_FP8_LAUNCHES = {"forward": 2, "backward": 2}
"""Extra C++ launches per local expert and pass under FP8 with ``GroupedLinear``: one
quantization of each expert's slice of FC1's and FC2's input in forward, of FC2's and
FC1's output gradient in backward (``tex.split_quantize``)."""

GROUPED_LINEAR_CALLS = {"forward": 2, "backward": 4}
"""Python-level ``general_grouped_gemm`` calls of TE ``GroupedLinear`` per pass, whatever
the number of experts: FC1 and FC2 in forward, the dgrad and the wgrad of each in backward
(`transformer_engine/pytorch/module/grouped_linear.py`, ``_GroupedLinear.forward`` and
``backward``; module docstring)."""

GROUPED_QUANTIZE_CALLS = {"forward": 2, "backward": 2}
"""Extra Python-level ``_split_quantize`` calls per pass under FP8: FC1's and FC2's input in
forward, FC2's and FC1's output gradient in backward (same source)."""

FUSED_MLP_LAUNCHES = {"forward": 4, "backward": 5}
"""Launches of the fused grouped MLP per pass, whatever the number of experts: forward
``splits_to_offsets``, the ``group_quantize`` of FC1's input, the FC1 GEMM-SwiGLU kernel
and the FC2 GEMM kernel; backward the ``group_quantize`` of FC2's output gradient, the FC2
dgrad-dSwiGLU kernel, FC1's dgrad and the two weight-gradient grouped GEMMs (module
docstring)."""


def expert_launches(
    local_experts: int, fp8: bool, direction: str, *, fused: bool, biased: bool = False
) -> tuple[int, int]:
    """(Python-level, per-expert C++) launches of the local experts' MLP in one pass (module
    docstring). ``GroupedLinear``: `GROUPED_LINEAR_CALLS` (+ `GROUPED_QUANTIZE_CALLS` under
    ``fp8``) Python-level, `UNFUSED_EXPERT_LAUNCHES` (+ `UNFUSED_EXPERT_FP8_LAUNCHES`) per
    local expert from C++, and with ``biased`` experts ``_apply_bias``'s Python-level
    `unfused_costs.EXPERT_BIAS_KERNELS_PER_EXPERT` per local expert plus its concatenation.
    The fused grouped MLP: `FUSED_MLP_LAUNCHES`, Python-level (TE's op fuser issues each
    kernel once per pass; its bias is scaled in the GEMM epilogue)."""
    if fused:
        return FUSED_MLP_LAUNCHES[direction], 0
    python = GROUPED_LINEAR_CALLS[direction]
    per_expert = UNFUSED_EXPERT_LAUNCHES[direction]
    if fp8:
        python += GROUPED_QUANTIZE_CALLS[direction]
        per_expert += UNFUSED_EXPERT_FP8_LAUNCHES[direction]
    if biased:
        python += EXPERT_BIAS_KERNELS_PER_EXPERT[direction] * local_experts + 1
    return python, per_expert * local_experts


EXPERT_WGRAD_LAUNCHES = 2
"""Of the backward launches of either implementation (`expert_launches`), those of the
weight gradients, one per projection (FC2 and FC1): with ``GroupedLinear`` the two
Python-level wgrad ``general_grouped_gemm`` calls of `GROUPED_LINEAR_CALLS` and, per local
expert, the two wgrad cuBLASLt GEMMs of `UNFUSED_EXPERT_LAUNCHES`; with the fused grouped
MLP the two weight-gradient grouped GEMMs of `FUSED_MLP_LAUNCHES`. The FP8 output-gradient
quantizations (`GROUPED_QUANTIZE_CALLS`, `UNFUSED_EXPERT_FP8_LAUNCHES`) precede the dgrad
GEMMs that read them and belong to the input-gradient part."""


def expert_dgrad_launches(local_experts: int, fp8: bool, *, fused: bool) -> tuple[int, int]:
    """(Python-level, per-expert C++) launches of the local experts' input-gradient part of
    a backward pass: the backward's `expert_launches` less the weight gradients'
    `EXPERT_WGRAD_LAUNCHES` (Python-level, and per local expert with ``GroupedLinear``).
    Under ``delay_wgrad_compute`` they run in ``mlp.backward``, the weight gradients later
    in ``mlp.backward_dw`` (Megatron-LM
    megatron/core/models/common/model_chunk_schedule_plan.py). ``_apply_bias``'s backward
    launches of biased experts are not among them (`moe_host_floor` counts them with the
    rest of the backward)."""
    python, per_expert = expert_launches(local_experts, fp8, "backward", fused=fused)
    wgrad_per_expert = 0 if fused else EXPERT_WGRAD_LAUNCHES * local_experts
    return python - EXPERT_WGRAD_LAUNCHES, per_expert - wgrad_per_expert


def expert_fp8_quantize_s(
    profile: HardwareProfile,
    *,
    rows: float,
    hidden: int,
    width: float,
    gated: bool,
    elem: int,
    local_experts: int,
    fused: bool,
    recipe: QuantRecipe,
    fc2_saves_input: bool = False,
    fc1_saves_input: bool = False,
) -> tuple[float, float]:
    """(forward, backward) seconds of quantizing the expert GEMM operands of one pass over
    ``rows`` routed rows (all local experts together) of an FP8 run under ``recipe``, or of
    an nvfp4 run (``nvfp4``: priced like per-tensor current scaling with NVFP4's bytes,
    `costmodel.fp8_quantization.fp8_quantize_time_s`).

    ``GroupedLinear``: forward FC1's input (rows x hidden) and FC2's input (rows x width),
    backward FC2's output gradient (rows x hidden) and FC1's (rows x 2·width gated, else
    width), each split into one quantization per expert, so each moves 1/local_experts of
    the bytes; per-tensor current scaling adds each expert slice's own amax and scale
    kernels (``multi_tensor_quantize_impl`` calls ``Float8CurrentScalingQuantizer::
    quantize`` per slice; no TP amax reduction in ``grouped_linear.py``). Their host
    launches are not added to `UNFUSED_EXPERT_FP8_LAUNCHES`: they are C++ calls inside one
    quantization of a slice, counted with it. Fused grouped MLP: only FC1's input (forward)
    and FC2's output gradient (backward), one quantization each (under current scaling one
    grouped amax pass first: ``compute_grouped_fp8_current_scaling_amax_and_scale`` in TE
    `pytorch/csrc/extensions/cast.cpp`); the other two are written by GEMM epilogues
    (module docstring).

    ``fc2_saves_input`` (selective ``moe_act`` recompute, unfused path:
    `costmodel.saved_inputs.expert_fc2_saves_input`): ``_GroupedLinear.forward`` casts FC2's
    input row-wise alone and the backward quantizes the recomputed 16-bit input again per
    expert (``_split_quantize`` after the dgrad GEMM, TE `module/grouped_linear.py`;
    `costmodel.runtimes.megatron.requant_costs.saved_input_requant_s`); not under
    ``delayed``, which TE refuses there. ``fc1_saves_input`` (fine-grained offloading of
    ``expert_fc1`` under current scaling: `costmodel.saved_inputs.expert_fc1_saves_input`):
    the same for FC1's input rows."""

    def quantize(elements: float, copies: int = 2) -> float:
        return fp8_quantize_time_s(profile, elements, elem, recipe=recipe, copies=copies)

    if fused:
        one = quantize(rows * hidden)
        return one, one
    fc1_out = (2 if gated else 1) * width
    kernels = max(local_experts, 1)
    saves = projection_saves_original_input(recipe)
    fc1_original, fc2_original = fc1_saves_input and saves, fc2_saves_input and saves

    def split(elements: float, copies: int = 2) -> float:
        return kernels * quantize(elements / kernels, copies)

    def again(elements: float) -> float:
        return kernels * saved_input_requant_s(
            profile, elements / kernels, elem, recipe, gathered=False
        )

    forward = split(rows * hidden, 1 if fc1_original else 2)
    forward += split(rows * width, 1 if fc2_original else 2)
    backward = split(rows * hidden) + split(rows * fc1_out)
    backward += (again(rows * hidden) if fc1_original else 0.0) + (
        again(rows * width) if fc2_original else 0.0
    )
    return forward, backward


def forward_host_floor_s(
    *, layer_gpu_s: float, post_sync_gpu_s: float, host_s: float, post_sync_host_s: float
) -> float:
    """Seconds a MoE layer's forward pass adds when the host issues its launches slower
    than the device runs them, with one stream synchronization inside the pass.

    The dropless dispatcher copies the received token counts to the host before it
    launches the token exchange and the experts (Megatron-core
    `megatron/core/transformer/moe/token_dispatcher.py`: ``_maybe_dtoh_and_synchronize``
    of the alltoall dispatcher; `fused_a2a.py` ``HybridEPDispatch``, blocking unless
    ``num_permuted_tokens`` is known). The device runs everything launched before that
    point first, so the launches after it (``post_sync_host_s``: the dispatch, the experts,
    the combine) can hide only behind the device work after it (``post_sync_gpu_s``), not
    behind the attention of the layer: max(0, host - GPU of the layer, post-sync host -
    post-sync GPU)."""
    return max(0.0, host_s - layer_gpu_s, post_sync_host_s - post_sync_gpu_s)


def merged_host_floor_s(
    *,
    forward_gpu_s: float,
    backward_gpu_s: float,
    post_sync_gpu_s: float,
    forward_host_s: float,
    backward_host_s: float,
    post_sync_host_s: float,
    backward_pre_sync_host_s: float = 0.0,
) -> float:
    """Seconds one merged step of the 1F1B all-to-all overlap adds when the host issues its
    launches slower than the device runs them: a MoE layer's forward (device
    ``forward_gpu_s``, host ``forward_host_s``) and another microbatch's backward of it
    (``backward_gpu_s``, ``backward_host_s``) issued as one sequence with the forward's
    token-count synchronization inside (`forward_host_floor_s`). The backward's kernels run
    after the synchronization, and so are its launches but ``backward_pre_sync_host_s``
    (Megatron-LM megatron/core/models/common/model_chunk_schedule_plan.py,
    ``TransformerLayerSchedulePlan.run``: ``moe_combine.backward`` and ``mlp.backward``
    precede ``moe_dispatch.forward``; ``mlp.backward_dw``, ``moe_dispatch.backward``,
    ``mlp.forward``, ``moe_combine.forward`` and ``pre_dispatch_computation.backward``
    follow it): max(0, host of both - GPU of both, post-sync host + backward host after the
    synchronization - post-sync GPU - backward GPU). Never more than the two passes' floors
    apart."""
    post_sync_backward_s = backward_host_s - backward_pre_sync_host_s
    return max(
        0.0,
        forward_host_s + backward_host_s - forward_gpu_s - backward_gpu_s,
        post_sync_host_s + post_sync_backward_s - post_sync_gpu_s - backward_gpu_s,
    )


def unattributed_device_s(
    profile: HardwareProfile, tokens: float, token_device_s: float
) -> tuple[float, float]:
    """(forward, backward) seconds of a MoE layer's device time that no priced kernel
    accounts for, over ``tokens`` tokens of the layer's rank at ``token_device_s`` per token
    (`ExecutionOptions.moe_token_device_s`, fitted: `costmodel.fitted_rates.MOE_TOKEN_DEVICE_S`,
    scaled to the profile's HBM bandwidth: `costmodel.fitted_rates.token_device_s`),
    split one third forward, two thirds backward as a layer's compute is; 0 on a profile
    that is not a GPU (the figure is fitted on GPU runs)."""
    if profile.device.kind != "gpu":
        return 0.0, 0.0
    total = scaled_token_device_s(profile, token_device_s) * tokens
    return total / 3.0, 2.0 * total / 3.0
