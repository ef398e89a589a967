"""Adam's preconditioner, for measuring gradient noise as Adam sees it (AdaptDL PR #95).

Adam divides each coordinate of the gradient by √v̂ + ε (v̂: the bias-corrected
second-moment estimate), so what its batch size trades against is the noise of the
*preconditioned* gradient g / (√v̂ + ε), not of g: a coordinate with a large second
moment is damped, one with a small one amplified. Both runtimes (the collective DDP
hook, `edl.runtime.collective.adaptive`; the pserver's aggregation,
`edl.runtime.pserver.aggregate`) divide the gradients by this before taking the
squared norms the estimator (`edl.throughput.efficiency`) reads, and scale the
learning rate by the square root of AdaScale's gain.

For the first few steps v̂ is mostly noise: AdaptDL measures plain gradients until
Adam has taken ``WARMUP_STEPS`` steps, and so does this.
"""

from __future__ import annotations

import math

import torch

__all__ = ["WARMUP_STEPS", "adam_preconditioner", "preconditioned_sqnorm", "sqnorm_tensor"]

WARMUP_STEPS = 5


def adam_preconditioner(
    exp_avg_sq: torch.Tensor | None, step: float, beta2: float, eps: float
) -> torch.Tensor | None:
    """√v̂ + ε from Adam's state (None: not warmed up, measure the plain gradient)."""
    if exp_avg_sq is None or step < WARMUP_STEPS:
        return None
    correction = 1.0 - beta2**step
    if correction <= 0:
        return None
    return (exp_avg_sq.detach().double().sqrt() / math.sqrt(correction)).add_(eps)


def sqnorm_tensor(grad: torch.Tensor, preconditioner: torch.Tensor | None) -> torch.Tensor:
    """|g / p|² in float64 (|g|² without a preconditioner), as a 0-d tensor."""
    flat = grad.detach().double().reshape(-1)
    if preconditioner is not None:
        flat = flat / preconditioner.reshape(-1)
    return torch.dot(flat, flat)


def preconditioned_sqnorm(grad: torch.Tensor, preconditioner: torch.Tensor | None) -> float:
    """`sqnorm_tensor` as a float."""
    return float(sqnorm_tensor(grad, preconditioner))
