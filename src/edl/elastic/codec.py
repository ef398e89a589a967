"""A state tree (state dicts: dicts, lists, tensors, numbers) as JSON plus tensors.

How a surviving worker hands its model and optimizer state to new workers without
pickle: the tree's shape and plain values travel as JSON (through the rendezvous
store), the tensors through the process group (one broadcast per dtype, flattened).
Dict keys keep their type (an optimizer's state is keyed by int).
"""

from __future__ import annotations

import json
from typing import Any

import torch

__all__ = ["CodecError", "decode", "encode", "flat_groups", "unflatten"]

Plain = int | float | bool | str | None


class CodecError(ValueError):
    """A value the codec cannot carry (names its path)."""


def _key(key: Any, path: str) -> list[Any]:
    if isinstance(key, bool) or not isinstance(key, int | str):
        raise CodecError(f"{path}: dict keys must be str or int (got {type(key).__name__})")
    return ["i" if isinstance(key, int) else "s", key]


def encode(tree: Any) -> tuple[str, list[torch.Tensor]]:
    """(JSON skeleton, tensors in the order the skeleton names them)."""
    tensors: list[torch.Tensor] = []

    def walk(node: Any, path: str) -> Any:
        if isinstance(node, torch.Tensor):
            tensors.append(node.detach())
            return {"T": len(tensors) - 1, "dtype": str(node.dtype).removeprefix("torch."),
                    "shape": list(node.shape)}
        if isinstance(node, dict):
            return {"d": [[_key(k, path), walk(v, f"{path}.{k}")] for k, v in node.items()]}
        if isinstance(node, list | tuple):
            tag = "l" if isinstance(node, list) else "t"
            return {tag: [walk(v, f"{path}[{i}]") for i, v in enumerate(node)]}
        if node is None or isinstance(node, bool | int | float | str):
            return {"v": node}
        raise CodecError(f"{path or 'state'}: cannot carry a {type(node).__name__}")

    skeleton = walk(tree, "")
    return json.dumps(skeleton), tensors


def tensor_specs(skeleton: str) -> list[tuple[torch.dtype, list[int]]]:
    """The (dtype, shape) of every tensor the skeleton names, in order."""
    specs: list[tuple[int, torch.dtype, list[int]]] = []

    def walk(node: Any) -> None:
        if "T" in node:
            dtype = getattr(torch, node["dtype"], None)
            if not isinstance(dtype, torch.dtype):
                raise CodecError(f"unknown dtype {node['dtype']!r}")
            specs.append((int(node["T"]), dtype, [int(n) for n in node["shape"]]))
        for child in node.get("l", node.get("t", [])):
            walk(child)
        for _, child in node.get("d", []):
            walk(child)

    walk(json.loads(skeleton))
    return [(dtype, shape) for _, dtype, shape in sorted(specs, key=lambda s: s[0])]


def decode(skeleton: str, tensors: list[torch.Tensor]) -> Any:
    """The tree back, with ``tensors`` in the places the skeleton names."""

    def walk(node: Any) -> Any:
        if "T" in node:
            return tensors[int(node["T"])]
        if "d" in node:
            return {(int(k) if kind == "i" else str(k)): walk(v) for (kind, k), v in node["d"]}
        if "l" in node:
            return [walk(v) for v in node["l"]]
        if "t" in node:
            return tuple(walk(v) for v in node["t"])
        return node["v"]

    return walk(json.loads(skeleton))


def flat_groups(tensors: list[torch.Tensor]) -> dict[torch.dtype, torch.Tensor]:
    """One flat contiguous tensor per dtype (the order of ``tensors`` kept within each)."""
    groups: dict[torch.dtype, list[torch.Tensor]] = {}
    for tensor in tensors:
        groups.setdefault(tensor.dtype, []).append(tensor.reshape(-1))
    return {dtype: torch.cat(parts) if parts else torch.empty(0, dtype=dtype)
            for dtype, parts in groups.items()}


def unflatten(
    specs: list[tuple[torch.dtype, list[int]]], flats: dict[torch.dtype, torch.Tensor]
) -> list[torch.Tensor]:
    """The tensors of ``specs`` cut back out of their dtype's flat tensor."""
    offsets = dict.fromkeys(flats, 0)
    out = []
    for dtype, shape in specs:
        count = 1
        for n in shape:
            count *= n
        start = offsets[dtype]
        out.append(flats[dtype][start:start + count].reshape(shape).clone())
        offsets[dtype] = start + count
    return out
