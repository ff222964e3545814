"""`RouterSpec`: how an MoE layer's router scores, selects, weights and balances experts.

Field names and defaults are Megatron-core's (`TransformerConfig` in
megatron/core/transformer/transformer_config.py, Megatron-LM d98e8a64), so a field maps
onto the Megatron-LM flag of the same name with dashes (`--moe-router-score-function`, ...)
and a default `RouterSpec()` is Megatron's default router: softmax over the top-k logits,
no expert bias, no group-limited routing, no scaling, the GShard/Switch auxiliary loss with
coefficient 0. The routing itself is `topk_routing_with_score_function` in
megatron/core/transformer/moe/moe_utils.py.

The rules checked here and in `check_router` are the ones `TransformerConfig.__post_init__`
raises on; Megatron options paraplan does not model (a list of load-balancing types,
``quantile_balancing``, ``moe_z_loss_coeff``, input jitter) have no field.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from specs.errors import SpecError
from specs.fieldcheck import require_choice, require_optional_positive

ScoreFunction = Literal["softmax", "sigmoid", "sqrtsoftplus"]
LoadBalancing = Literal["aux_loss", "seq_aux_loss", "global_aux_loss", "sinkhorn", "none"]
RouterDtype = Literal["fp32", "fp64"]

CAPACITY_BALANCING: tuple[str, ...] = ("aux_loss", "seq_aux_loss", "global_aux_loss", "none")
"""Load-balancing types Megatron-core accepts with an expert capacity factor."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RouterSpec:
    """The router of every MoE layer of a model (Megatron-core's `TopKRouter` settings)."""

    moe_router_score_function: ScoreFunction = "softmax"
    """Score of each expert from its logit: `softmax` (over the selected or, with
    `moe_router_pre_softmax`, all experts), `sigmoid` (DeepSeek-V3; the top-k scores are
    then normalized to sum 1 when top-k > 1) or `sqrtsoftplus`."""
    moe_router_pre_softmax: bool = False
    """Softmax over all experts before the top-k (Switch/Qwen3 without `norm_topk_prob`)
    instead of over the top-k logits; no effect with `sigmoid` or `sqrtsoftplus`."""
    moe_router_enable_expert_bias: bool = False
    """Aux-loss-free balancing (arXiv 2408.15664): a per-expert bias added to the scores
    for selection only, updated after each global batch from the tokens each expert got."""
    moe_router_bias_update_rate: float = 1e-3
    """Step of the expert-bias update (DeepSeek-V3's gamma, 1e-3)."""
    moe_router_num_groups: int | None = None
    """Group-limited routing: the experts form this many equal groups (DeepSeek-V3's
    `n_group`); None means no grouping."""
    moe_router_group_topk: int | None = None
    """Group-limited routing: groups each token may use, ranked by the sum of their
    top-(k / group_topk) scores (DeepSeek-V3's `topk_group`); None means no limit."""
    moe_router_topk_scaling_factor: float | None = None
    """Factor on the routing weights of the selected experts (DeepSeek-V3's
    `routed_scaling_factor`); None means 1."""
    moe_router_load_balancing_type: LoadBalancing = "aux_loss"
    """`aux_loss` (GShard/Switch, per micro-batch), `seq_aux_loss` (DeepSeek-V2/V3, per
    sequence), `global_aux_loss` (per global batch), `sinkhorn` (S-BASE) or `none`."""
    moe_aux_loss_coeff: float = 0.0
    """Weight of the auxiliary loss in the training loss; 0 means the loss is not applied."""
    moe_router_dtype: RouterDtype | None = None
    """Dtype of the router logits and the weighted sum of the expert outputs; None keeps
    the activations' dtype."""

    def __post_init__(self) -> None:
        require_choice(self, "moe_router_score_function", ScoreFunction)
        require_choice(self, "moe_router_load_balancing_type", LoadBalancing)
        if self.moe_router_dtype is not None:
            require_choice(self, "moe_router_dtype", RouterDtype)
        require_optional_positive(self, "moe_router_num_groups", "moe_router_group_topk")
        for name in ("moe_router_bias_update_rate", "moe_aux_loss_coeff"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise SpecError(f"RouterSpec.{name} must be a number >= 0, got {value!r}")
        scale = self.moe_router_topk_scaling_factor
        if scale is not None and (isinstance(scale, bool) or not scale > 0):
            raise SpecError(
                f"RouterSpec.moe_router_topk_scaling_factor must be > 0 or null, got {scale!r}"
            )
        self._check_megatron_rules()

    def _check_megatron_rules(self) -> None:
        """The router rules of Megatron-core's `TransformerConfig.__post_init__` that need
        no other field of the model."""
        score = self.moe_router_score_function
        if self.moe_router_enable_expert_bias and score == "softmax":
            raise SpecError(
                "RouterSpec: moe_router_enable_expert_bias (true) needs "
                "moe_router_score_function 'sigmoid' or 'sqrtsoftplus', got 'softmax' "
                "(Megatron-core rule); set the score function to sigmoid or turn the expert "
                "bias off"
            )
        groups, group_topk = self.moe_router_num_groups, self.moe_router_group_topk
        if group_topk is not None and groups is None:
            raise SpecError(
                f"RouterSpec: moe_router_group_topk ({group_topk}) needs "
                "moe_router_num_groups (null) for group-limited routing (Megatron-core rule); "
                "set moe_router_num_groups or unset moe_router_group_topk"
            )
        if group_topk is not None and groups is not None and group_topk > groups:
            raise SpecError(
                f"RouterSpec: moe_router_group_topk ({group_topk}) must not exceed "
                f"moe_router_num_groups ({groups}) (Megatron-core rule); choose "
                f"moe_router_group_topk <= {groups}"
            )


def check_router(
    router: RouterSpec,
    *,
    where: str,
    num_experts: int,
    top_k: int,
    capacity_factor: float | None,
) -> None:
    """Megatron-core's router rules that involve the model's experts (`SpecError` naming
    ``where``): the experts divide into `moe_router_num_groups` equal groups; top-1
    routing with a softmax over the one selected logit has a zero gradient, so it needs
    `moe_router_pre_softmax` (or sinkhorn); a capacity factor works only with the
    auxiliary-loss balancing types or none."""
    groups = router.moe_router_num_groups
    if groups is not None and num_experts % groups:
        raise SpecError(
            f"{where}: num_experts ({num_experts}) must be divisible by "
            f"router.moe_router_num_groups ({groups}) (Megatron-core rule); choose a divisor "
            f"of {num_experts}"
        )
    balancing = router.moe_router_load_balancing_type
    if (
        top_k == 1
        and router.moe_router_score_function == "softmax"
        and not router.moe_router_pre_softmax
        and balancing != "sinkhorn"
    ):
        raise SpecError(
            f"{where}: moe_top_k (1) with router.moe_router_score_function 'softmax' needs "
            "router.moe_router_pre_softmax (false): a softmax over one selected logit is "
            "constant, so the router gets no gradient (Megatron-core rule); set "
            "moe_router_pre_softmax true (Switch-style: softmax over all experts)"
        )
    if capacity_factor is not None and balancing not in CAPACITY_BALANCING:
        raise SpecError(
            f"{where}: moe_capacity_factor ({capacity_factor}) works only with "
            f"router.moe_router_load_balancing_type in {', '.join(CAPACITY_BALANCING)}, got "
            f"{balancing!r} (Megatron-core rule); change the balancing type or set "
            "moe_capacity_factor null (dropless)"
        )
