"""What a worker trains: its model, optimizer and the loop's progress, as one tree."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch

__all__ = ["Progress", "State"]


@dataclass
class Progress:
    """Where training is: the epoch, positions of its order consumed, steps done in all."""

    epoch: int = 0
    consumed: int = 0
    step: int = 0


class State:
    """The model and optimizer a surviving worker hands to new ones, plus ``extra``
    plain values the script wants carried across worlds (numbers, strings, tensors)."""

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer | None = None,
        **extra: Any,
    ) -> None:
        self.model = model
        self.optimizer = optimizer
        self.extra: dict[str, Any] = dict(extra)
        self.progress = Progress()

    def tree(self) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict() if self.optimizer is not None else None,
            "extra": self.extra,
            "progress": asdict(self.progress),
        }

    def load(self, tree: dict[str, Any]) -> None:
        self.model.load_state_dict(tree["model"])
        if self.optimizer is not None and tree.get("optimizer") is not None:
            self.optimizer.load_state_dict(tree["optimizer"])
        self.extra = dict(tree.get("extra") or {})
        self.progress = Progress(**tree["progress"])
