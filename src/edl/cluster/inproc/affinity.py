"""Preferred node affinity, as kube-scheduler's ``NodeAffinity`` score plugin scores it.

Upstream (`pkg/scheduler/framework/plugins/nodeaffinity/node_affinity.go` ``Score`` and
``NormalizeScore``; terms parsed by `component-helpers/scheduling/corev1/nodeaffinity`
``NewPreferredSchedulingTerms``): a node's raw score is the sum of the weights of the
pod's ``preferredDuringSchedulingIgnoredDuringExecution`` terms it matches; a term
matches when every ``matchExpressions`` requirement holds on the node's labels and
every ``matchFields`` one on its name (AND within a term); a term with weight 0 or no
requirement is skipped. ``helper.DefaultNormalizeScore(100, false)`` then scales the
scores of the scored (feasible) nodes to ``score * 100 // max`` (all 0 when the max
is 0), and the framework adds ``NODE_AFFINITY_WEIGHT`` (2, the default profile's
weight, `apis/config/v1/default_plugins.go`) times that to the node's total.

Label operators as ``labels.Requirement.Matches``: ``In`` (label present, value
listed), ``NotIn`` (absent, or value not listed), ``Exists``, ``DoesNotExist``,
``Gt``/``Lt`` (present, an integer, compared with the one integer value). Fields:
``metadata.name`` with ``In``/``NotIn`` and one value. A term the API server would
reject (bad weight, operator, value count, field key) raises `AffinityError` naming
every wrong field, as pod validation does. Required node affinity, `nodeSelector` and
taints are filters: `edl.accounting.eligibility`, applied by `NodeIndex.find`.

Why an index: matching runs against label -> value -> node positions, so a term
costs O(values + matched nodes), not O(nodes) in Python, on 500-node clusters.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

NODE_AFFINITY_WEIGHT = 2
MAX_NODE_SCORE = 100
NAME_FIELD = "metadata.name"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
LABEL_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
FIELD_OPERATORS = ("In", "NotIn")
_INT = re.compile(r"[+-]?[0-9]+")


class AffinityError(ValueError):
    """A pod's node affinity the API server would reject; ``problems`` lists each."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        super().__init__("; ".join(self.problems))


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    operator: str
    values: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class PreferredTerm:
    weight: int
    expressions: tuple[Requirement, ...]
    fields: tuple[Requirement, ...]


class LabelIndex:
    """Node positions by label key and value, and by name (nodes are only added)."""

    def __init__(self) -> None:
        self.size = 0
        self.by_label: dict[str, dict[str, list[int]]] = {}
        self.by_name: dict[str, int] = {}

    def add(self, name: str, labels: Mapping[str, str]) -> int:
        position = self.size
        self.size += 1
        self.by_name[name] = position
        for key, value in labels.items():
            self.by_label.setdefault(key, {}).setdefault(value, []).append(position)
        return position

    def _mask(self, positions: Sequence[int] = ()) -> np.ndarray:
        mask = np.zeros(self.size, dtype=bool)
        if positions:
            mask[list(positions)] = True
        return mask

    def label_mask(self, requirement: Requirement) -> np.ndarray:
        values = self.by_label.get(requirement.key, {})
        operator = requirement.operator
        if operator in ("In", "NotIn"):
            listed = [p for v in requirement.values for p in values.get(v, ())]
            mask = self._mask(listed)
            return mask if operator == "In" else ~mask
        if operator in ("Exists", "DoesNotExist"):
            mask = self._mask([p for positions in values.values() for p in positions])
            return mask if operator == "Exists" else ~mask
        bound = int(requirement.values[0])  # Gt / Lt: validated to one integer
        chosen = []
        for value, positions in values.items():
            number = _integer(value)
            if number is None:
                continue
            if (number > bound) if operator == "Gt" else (number < bound):
                chosen += positions
        return self._mask(chosen)

    def field_mask(self, requirement: Requirement) -> np.ndarray:
        position = self.by_name.get(requirement.values[0])
        mask = self._mask(() if position is None else (position,))
        return mask if requirement.operator == "In" else ~mask

    def raw_scores(self, terms: Sequence[PreferredTerm]) -> np.ndarray:
        """Per node, the sum of the weights of the terms it matches (``Score``)."""
        total = np.zeros(self.size, dtype=np.int64)
        for term in terms:
            match = np.ones(self.size, dtype=bool)
            for requirement in term.expressions:
                match &= self.label_mask(requirement)
            for requirement in term.fields:
                match &= self.field_mask(requirement)
            total += match * term.weight
        return total


def normalize(raw: np.ndarray) -> np.ndarray:
    """``DefaultNormalizeScore(MaxNodeScore, reverse=false)`` over the scored nodes."""
    top = int(raw.max()) if raw.size else 0
    if top == 0:
        return np.zeros_like(raw)
    return raw * MAX_NODE_SCORE // top


def preferred_terms(spec: Mapping[str, Any] | None) -> tuple[PreferredTerm, ...]:
    """The pod spec's preferred node-affinity terms that score (weight > 0, not empty).

    Raises `AffinityError` with every problem pod validation would report.
    """
    affinity = ((spec or {}).get("affinity") or {}).get("nodeAffinity") or {}
    raw = affinity.get(PREFERRED) or []
    path = f"spec.affinity.nodeAffinity.{PREFERRED}"
    problems: list[str] = []
    terms = []
    if not isinstance(raw, list):
        raise AffinityError([f"{path}: must be a list"])
    for i, term in enumerate(raw):
        where = f"{path}[{i}]"
        if not isinstance(term, Mapping):
            problems.append(f"{where}: must be an object")
            continue
        weight = term.get("weight")
        if not isinstance(weight, int) or isinstance(weight, bool) or not 1 <= weight <= 100:
            problems.append(f"{where}.weight: must be an integer in 1..100, not {weight!r}")
        preference = term.get("preference")
        if not isinstance(preference, Mapping):
            problems.append(f"{where}.preference: required")
            continue
        expressions = _requirements(preference.get("matchExpressions"),
                                    f"{where}.preference.matchExpressions", problems, False)
        fields = _requirements(preference.get("matchFields"),
                               f"{where}.preference.matchFields", problems, True)
        if isinstance(weight, int) and weight > 0 and (expressions or fields):
            terms.append(PreferredTerm(weight, expressions, fields))
    if problems:
        raise AffinityError(problems)
    return tuple(terms)


def _requirements(raw: Any, path: str, problems: list[str], field: bool
                  ) -> tuple[Requirement, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        problems.append(f"{path}: must be a list")
        return ()
    out = []
    for j, item in enumerate(raw):
        where = f"{path}[{j}]"
        if not isinstance(item, Mapping):
            problems.append(f"{where}: must be an object")
            continue
        key, operator = item.get("key"), item.get("operator")
        values = item.get("values") or []
        before = len(problems)
        if not isinstance(key, str) or not key:
            problems.append(f"{where}.key: required")
        elif field and key != NAME_FIELD:
            problems.append(f"{where}.key: not supported: {key!r} (only {NAME_FIELD!r})")
        allowed = FIELD_OPERATORS if field else LABEL_OPERATORS
        if operator not in allowed:
            problems.append(f"{where}.operator: must be one of {', '.join(allowed)}, "
                            f"not {operator!r}")
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            problems.append(f"{where}.values: must be a list of strings")
        elif field and len(values) != 1:
            problems.append(f"{where}.values: must have one element")
        elif operator in ("In", "NotIn") and not values:
            problems.append(f"{where}.values: must be specified for {operator}")
        elif operator in ("Exists", "DoesNotExist") and values:
            problems.append(f"{where}.values: must be empty for {operator}")
        elif operator in ("Gt", "Lt") and (len(values) != 1 or _integer(values[0]) is None):
            problems.append(f"{where}.values: {operator} takes one integer value")
        if len(problems) == before and isinstance(key, str):
            out.append(Requirement(key, str(operator), tuple(values)))
    return tuple(out)


def _integer(text: str) -> int | None:
    """``strconv.ParseInt(text, 10, 64)``: optional sign, decimal digits, int64."""
    if not _INT.fullmatch(text):
        return None
    number = int(text)
    return number if -(1 << 63) <= number < (1 << 63) else None
