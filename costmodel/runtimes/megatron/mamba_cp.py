"""Context parallelism of a Mamba-2 mixer (cp > 1) on one rank: the all-to-alls between the
sequence split and the head split (`cp_all_to_all_bytes`, `mamba_cp_pair`), the layout
copies around them (`cp_layout_s`), and the shape the conv1d and the SSD scan see
(`scan_shape`).

Source: Megatron-LM d98e8a64 ``megatron/core/ssm/mamba_context_parallel.py``
(`MambaContextParallel`) as `MambaMixer.forward` and `MambaMixer._ssm_training`
(``megatron/core/ssm/mamba_mixer.py``) call it. The input projection runs on the rank's
sequence shard, T = b·s/cp tokens at the cp = 1 widths of a tp rank. ``pre_conv_ssm``
splits its output into z, x, B, C and dt and sends each through `_all_to_all_cp2hp`
(``all_to_all_sp2hp`` of ``megatron/core/tensor_parallel/mappings.py``): [s/cp, b, w] ->
[s, b, w/cp]; B and C are first repeated per group ``group_repeat_count`` = cp/(G/tp) times
when G/tp < cp (einops ``repeat``), so their width before the exchange is max(G/tp, cp)·N.
It concatenates the five results and undoes the attention load balancing
(`_undo_attention_load_balancing`, a chunk-and-concatenate of the sequence). The conv1d,
the SSD scan and the z gate then run over the whole sequence, b·s tokens, on H/(tp·cp)
heads (`costmodel.mamba_activations.mamba_widths` with cp). ``post_conv_ssm`` restores the
load-balanced order (`_redo_attention_load_balancing`) and sends the scan output through
`_all_to_all_hp2cp` (``all_to_all_hp2sp``): [s, b, d_inner/(tp·cp)] -> [s/cp, b,
d_inner/tp]; the grouped RMSNorm and the output projection run on the shard. The autograd
of each all-to-all is the opposite all-to-all of its gradient (``_AllToAll.backward``), so
the backward carries the same six exchanges with the same sizes.

Each exchange is its own NCCL ``all_to_all_single`` on the compute stream between kernels
that need its result, so it is exposed in full. ``all_to_all_sp2hp`` splits its input
along the width and concatenates the pieces along the sequence before the exchange, and
``all_to_all_hp2sp`` concatenates after it: one copy per exchange each way.
"""

from __future__ import annotations

import dataclasses

from costmodel import compute as ops
from costmodel.collectives import collective_time_s
from costmodel.mamba_activations import mamba_widths
from costmodel.passes import PassCost
from costmodel.runtimes.megatron.layer_shape import LayerShape
from costmodel.topology import GroupPlacement
from profiles.schema import HardwareProfile
from specs.model import ModelSpec

CP_EXCHANGES: tuple[str, ...] = ("z", "x", "B", "C", "dt", "y")
"""The tensors of `cp_all_to_all_bytes`, in Megatron's order: five before the scan
(``pre_conv_ssm``), the scan output after it (``post_conv_ssm``)."""


def scan_shape(x: LayerShape) -> LayerShape:
    """The shape the conv1d and the SSD scan run on: the whole sequence, b·s tokens
    (b·s/cp · cp), on each rank under context parallelism; ``x`` itself at cp = 1."""
    if x.cp == 1:
        return x
    tokens = x.tokens * x.cp
    return dataclasses.replace(x, tokens=tokens, norm_tokens=tokens)


def cp_all_to_all_bytes(model: ModelSpec, x: LayerShape) -> dict[str, float]:
    """Bytes per rank of each all-to-all of one Mamba-2 mixer's forward (nccl-tests size:
    the whole tensor a rank holds before the exchange), by the names of `CP_EXCHANGES`; {}
    at cp = 1. z and x: e·T·d_inner/tp each; B and C: e·T·max(G/tp, cp)·N each (repeated
    groups); dt: e·T·H/tp; y: e·b·s·d_inner/(tp·cp), the same as e·T·d_inner/tp. Each is
    cp times the scan-side width (`mamba_widths` with cp) on T = b·s/cp tokens. The
    backward sends the gradients of the same six tensors (module docstring)."""
    if x.cp == 1:
        return {}
    scan = mamba_widths(model, x.tp, x.cp)
    per_token = x.elem * x.tokens * x.cp
    group_width = scan.groups * scan.state_dim
    widths = (scan.inner, scan.inner, group_width, group_width, scan.heads, scan.inner)
    return {name: per_token * width for name, width in zip(CP_EXCHANGES, widths, strict=True)}


def mamba_cp_pair(
    model: ModelSpec, profile: HardwareProfile, x: LayerShape, group: GroupPlacement
) -> tuple[PassCost, PassCost]:
    """(forward, backward) context-parallel exchanges of one Mamba-2 mixer: the six
    all-to-alls of `cp_all_to_all_bytes` over the cp group each way, one
    `costmodel.collectives.collective_time_s` call per tensor, all of it exposed (module
    docstring)."""
    sizes = cp_all_to_all_bytes(model, x)
    total_s = sum(collective_time_s(profile, "all_to_all", b, group) for b in sizes.values())
    total_bytes = sum(sizes.values())
    one = PassCost(cp_s=total_s, cp_exposed_s=total_s, cp_bytes=total_bytes)
    return one, one


def cp_layout_s(model: ModelSpec, profile: HardwareProfile, x: LayerShape) -> tuple[float, float]:
    """(forward, backward) seconds of the memory-bound copies context parallelism adds to
    one Mamba-2 mixer; (0, 0) at cp = 1. With E = e·b·s bytes per scan-side channel
    (`mamba_widths` with cp) and w_in, w_y the scan-side widths of the five exchanged
    inputs and of the scan output, each copy reads and writes its tensor:

    - before the scan: ``all_to_all_sp2hp``'s split-and-concatenate of each of z, x, B, C,
      dt (2·E·w_in in 5 kernels), the ``torch.cat`` of the five results (2·E·w_in) and
      `_undo_attention_load_balancing` (2·E·w_in);
    - the B and C ``repeat`` when G/tp < cp: reads e·T·2·(G/tp)·N and writes
      e·T·2·cp·N, T = b·s/cp;
    - after the scan: `_redo_attention_load_balancing` and ``all_to_all_hp2sp``'s
      concatenate (2·E·w_y each).

    The backward runs each copy's autograd mirror (the split of a concatenation's gradient
    and the concatenation of a split's, the sum of the repeated B and C gradients): the
    same bytes in the same number of kernels."""
    if x.cp == 1:
        return 0.0, 0.0
    scan = mamba_widths(model, x.tp, x.cp)
    e, seq_tokens = x.elem, x.tokens * x.cp
    before = 2 * e * seq_tokens * scan.in_proj
    after = 2 * e * seq_tokens * scan.inner
    groups_tp = model.mamba_num_groups / x.tp
    seconds = ops.memory_bound_time_s(profile, 3 * before, num_ops=7) + ops.memory_bound_time_s(
        profile, 2 * after, num_ops=2
    )
    if groups_tp < x.cp:
        repeat_bytes = e * x.tokens * 2 * scan.state_dim * (groups_tp + x.cp)
        seconds += ops.memory_bound_time_s(profile, repeat_bytes, num_ops=2)
    return seconds, seconds
