"""Optimizers that live on the pserver and update one flat block in place.

Each keeps its per-block state as named tensors, so a checkpoint is just
more raw arrays. A new optimizer is a new class registered in OPTIMIZERS.
``lr_scale`` multiplies the learning rate of one step (AdaScale's gain, when the job
adapts its batch); `preconditioner` is what the gradient noise is measured through
(`edl.runtime.precondition`: Adam's √v̂ + ε, None for plain SGD and momentum).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from edl.runtime.precondition import adam_preconditioner


@dataclass(frozen=True)
class OptimizerConfig:
    name: str = "sgd"
    lr: float = 0.01
    momentum: float = 0.9
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    weight_decay: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)


class SGD:
    adaptive = False  # Adam-like: steps normalised per coordinate (AdaScale's gain √)

    def __init__(self, cfg: OptimizerConfig) -> None:
        self.cfg = cfg

    def preconditioner(self, state: dict[str, torch.Tensor]) -> torch.Tensor | None:
        return None

    def _grad(self, param: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
        if self.cfg.weight_decay:
            return grad.add(param, alpha=self.cfg.weight_decay)
        return grad

    def step(self, param: torch.Tensor, grad: torch.Tensor, state: dict[str, torch.Tensor],
             lr_scale: float = 1.0) -> None:
        param.add_(self._grad(param, grad), alpha=-self.cfg.lr * lr_scale)


class Momentum(SGD):
    def step(self, param: torch.Tensor, grad: torch.Tensor, state: dict[str, torch.Tensor],
             lr_scale: float = 1.0) -> None:
        grad = self._grad(param, grad)
        buf = state.get("momentum")
        if buf is None:
            buf = state["momentum"] = grad.clone()
        else:
            buf.mul_(self.cfg.momentum).add_(grad)
        param.add_(buf, alpha=-self.cfg.lr * lr_scale)


class Adam(SGD):
    adaptive = True

    def preconditioner(self, state: dict[str, torch.Tensor]) -> torch.Tensor | None:
        step = state.get("step")
        return adam_preconditioner(state.get("exp_avg_sq"),
                                   0.0 if step is None else float(step[0]),
                                   self.cfg.beta2, self.cfg.eps)

    def step(self, param: torch.Tensor, grad: torch.Tensor, state: dict[str, torch.Tensor],
             lr_scale: float = 1.0) -> None:
        c = self.cfg
        grad = self._grad(param, grad)
        if "exp_avg" not in state:
            state["exp_avg"] = torch.zeros_like(param)
            state["exp_avg_sq"] = torch.zeros_like(param)
            state["step"] = torch.zeros(1, dtype=torch.float64)
        state["step"] += 1
        t = float(state["step"][0])
        m, v = state["exp_avg"], state["exp_avg_sq"]
        m.mul_(c.beta1).add_(grad, alpha=1 - c.beta1)
        v.mul_(c.beta2).addcmul_(grad, grad, value=1 - c.beta2)
        bias1 = 1 - c.beta1**t
        bias2 = 1 - c.beta2**t
        denom = (v / bias2).sqrt_().add_(c.eps)
        param.addcdiv_(m, denom, value=-c.lr * lr_scale / bias1)


OPTIMIZERS: dict[str, type[SGD]] = {"sgd": SGD, "momentum": Momentum, "adam": Adam}


def make_optimizer(cfg: OptimizerConfig) -> SGD:
    try:
        cls = OPTIMIZERS[cfg.name]
    except KeyError:
        raise ValueError(
            f"optimizer.name: unknown optimizer {cfg.name!r} (known: {sorted(OPTIMIZERS)})"
        ) from None
    if not cfg.lr > 0:
        raise ValueError(f"optimizer.lr: must be > 0 (got {cfg.lr})")
    return cls(cfg)
