"""Safe YAML loading that rejects duplicate mapping keys, naming the key's path.

Why: PyYAML (like most YAML loaders) silently keeps the last of two equal keys,
so a job file with `min-instance` written twice runs with a value the user may
not have meant. Kubernetes' own decoder (sigs.k8s.io/yaml, strict) rejects
them; so does edl, with the path (`spec.trainer.min-instance`) and both lines.

`DuplicateKeyError` is a `yaml.MarkedYAMLError`, so callers that already turn a
YAML error into one line (`not valid YAML at line L, column C: <problem>`) report
it without change. Only safe construction is used (no Python objects).
"""

from __future__ import annotations

import json
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from edl.api.errors import join_path

__all__ = ["DuplicateKeyError", "load_json_or_yaml", "safe_load", "safe_load_all"]

_MERGE_TAG = "tag:yaml.org,2002:merge"


class DuplicateKeyError(yaml.MarkedYAMLError):
    """A mapping with the same key twice; `path` is where (`spec.trainer.min-instance`)."""

    def __init__(self, path: str, first: yaml.Mark | None, second: yaml.Mark | None) -> None:
        self.path = path
        where = f" (first at line {first.line + 1})" if first is not None else ""
        super().__init__(problem=f"duplicate key {path}{where}", problem_mark=second)


def safe_load_all(text: str) -> list[Any]:
    """Every document of a YAML stream, as plain data; raises on a duplicate key."""
    loader = yaml.SafeLoader(text)
    documents: list[Any] = []
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is None:  # check_node() said there is one
                break
            check_unique_keys(node)
            documents.append(loader.construct_document(node))
    finally:
        loader.dispose()
    return documents


def safe_load(text: str) -> Any:
    """The single document of `text` (None when empty); raises on a duplicate key."""
    documents = safe_load_all(text)
    if len(documents) > 1:
        raise yaml.YAMLError(f"expected one YAML document, found {len(documents)}")
    return documents[0] if documents else None


def load_json_or_yaml(text: str) -> list[Any]:
    """JSON if it parses as JSON (fast for big kubectl output), else YAML; unique keys both."""
    try:
        return [json.loads(text, object_pairs_hook=_unique_pairs)]
    except _JsonDuplicate:
        return safe_load_all(text)  # JSON is YAML: this names the duplicate's path and line
    except ValueError:
        return safe_load_all(text)


class _JsonDuplicate(Exception):
    pass


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _JsonDuplicate(key)
        out[key] = value
    return out


def check_unique_keys(root: Node) -> None:
    """Walk a composed YAML node tree; raise DuplicateKeyError at the first repeated key."""
    seen_nodes: set[int] = set()  # aliases may share (or recursively contain) nodes
    stack: list[tuple[Node, list[str | int]]] = [(root, [])]
    while stack:
        node, path = stack.pop()
        if id(node) in seen_nodes:
            continue
        seen_nodes.add(id(node))
        children: list[tuple[Node, list[str | int]]] = []
        if isinstance(node, MappingNode):
            keys: dict[tuple[str, str], ScalarNode] = {}
            for key_node, value_node in node.value:
                if isinstance(key_node, ScalarNode) and key_node.tag != _MERGE_TAG:
                    key = (key_node.tag, key_node.value)
                    if key in keys:
                        raise DuplicateKeyError(
                            join_path([*path, key_node.value]) or key_node.value,
                            keys[key].start_mark,
                            key_node.start_mark,
                        )
                    keys[key] = key_node
                    children.append((value_node, [*path, key_node.value]))
                else:
                    children.append((value_node, path))
        elif isinstance(node, SequenceNode):
            children = [(item, [*path, index]) for index, item in enumerate(node.value)]
        stack.extend(reversed(children))  # popped in document order: the first duplicate wins
