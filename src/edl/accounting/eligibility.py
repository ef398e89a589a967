"""Which nodes a pod may land on, decided as kube-scheduler's filters decide it (pure).

Three filters of the default profile, transcribed from upstream
(`k8s.io/component-helpers/scheduling/corev1`):

* **TaintToleration** — `FindMatchingUntoleratedTaint` over the node's `NoSchedule`
  and `NoExecute` taints (`PreferNoSchedule` only lowers a score): a taint is
  tolerated when some toleration `ToleratesTaint` it — an empty effect matches every
  effect, an empty key (operator `Exists`) every key, `Exists` every value, `Equal`
  (or no operator) the same value; any other operator matches nothing (the numeric
  `Lt`/`Gt` tolerations are behind an alpha feature gate, off by default).
* **NodeAffinity**, required part — `nodeaffinity.GetRequiredNodeAffinity(pod).Match(node)`:
  every `nodeSelector` pair equals the node's label, and, when the pod has
  `requiredDuringSchedulingIgnoredDuringExecution`, one of its terms matches (terms
  are ORed; a term with neither expressions nor fields is dropped and matches
  nothing; within a term every requirement must hold; a term whose requirement does
  not parse matches nothing). Operators `In`, `NotIn`, `Exists`, `DoesNotExist`,
  `Gt`, `Lt` on labels (`Gt`/`Lt`: one integer value, and the label must parse as
  an integer), and `matchFields` on `metadata.name` with `In`/`NotIn` and one value.
* **InterPodAffinity** and **PodTopologySpread**, for a job's own trainers only: a
  required pod anti-affinity term, a required pod affinity term or a `DoNotSchedule`
  topology spread constraint whose label selector selects the pod itself, on
  `kubernetes.io/hostname` or `topology.kubernetes.io/zone` (`Topology`; the planner
  caps trainers per domain, `policy/topology.py`). Any other required term or
  `DoNotSchedule` constraint is what the planner cannot model: `topology_problems`
  names it, and validation refuses it (`ScheduleAnyway` and preferred terms only
  score nodes: not read).
* Resources that must exist at all (`NodeResourcesFit` for a resource the node does
  not offer): left to the room model, which counts every resource.

Constraints are frozen and hashable, so a plan evaluates each distinct set once per
group of alike nodes (`NodeFacts.group`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "NO_CONSTRAINTS",
    "NodeFacts",
    "PodConstraints",
    "Requirement",
    "Taint",
    "Term",
    "Toleration",
    "Topology",
    "constraints_of",
    "find_untolerated_taint",
    "node_facts",
    "requirement_matches",
    "taints_of",
    "tolerates",
    "topology_problems",
]

FILTERED_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
HOSTNAME_LABEL = "kubernetes.io/hostname"
ZONE_LABEL = "topology.kubernetes.io/zone"
TOPOLOGY_KEYS = (HOSTNAME_LABEL, ZONE_LABEL)
_INT64 = (-(1 << 63), (1 << 63) - 1)


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str = ""
    effect: str = ""


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""
    operator: str = ""
    value: str = ""
    effect: str = ""


def tolerates(toleration: Toleration, taint: Taint) -> bool:
    """`Toleration.ToleratesTaint` (upstream, with the comparison operators gated off)."""
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.key and toleration.key != taint.key:
        return False
    if toleration.operator in ("", "Equal"):
        return toleration.value == taint.value
    return toleration.operator == "Exists"


def find_untolerated_taint(
    taints: Iterable[Taint], tolerations: Sequence[Toleration]
) -> Taint | None:
    """The first NoSchedule/NoExecute taint no toleration tolerates, or None."""
    for taint in taints:
        if taint.effect in FILTERED_EFFECTS and not any(tolerates(t, taint) for t in tolerations):
            return taint
    return None


@dataclass(frozen=True, slots=True)
class Requirement:
    """One `NodeSelectorRequirement` (label or field)."""

    key: str
    operator: str
    values: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Term:
    """One `NodeSelectorTerm`; `valid` False when a requirement does not parse."""

    expressions: tuple[Requirement, ...] = ()
    fields: tuple[Requirement, ...] = ()
    valid: bool = True


def _int64(text: str) -> int | None:
    """Go's strconv.ParseInt(text, 10, 64): optional sign, decimal digits, in range."""
    body = text[1:] if text[:1] in "+-" else text
    if not body or not body.isascii() or not body.isdigit():
        return None
    value = int(text)
    return value if _INT64[0] <= value <= _INT64[1] else None


def _requirement_valid(req: Requirement) -> bool:
    """Whether `labels.NewRequirement` accepts it (values the operator needs)."""
    if req.operator in ("In", "NotIn"):
        return len(req.values) > 0
    if req.operator in ("Exists", "DoesNotExist"):
        return len(req.values) == 0
    if req.operator in ("Gt", "Lt"):
        return len(req.values) == 1 and _int64(req.values[0]) is not None
    return False


def _field_valid(req: Requirement) -> bool:
    return req.key == "metadata.name" and req.operator in ("In", "NotIn") and len(req.values) == 1


def requirement_matches(req: Requirement, labels: Mapping[str, str]) -> bool:
    """One label requirement against a node's labels (`labels.Requirement.Matches`)."""
    op, present = req.operator, req.key in labels
    if op == "In":
        return present and labels[req.key] in req.values
    if op == "NotIn":
        return not present or labels[req.key] not in req.values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt") and present:
        have, want = _int64(labels[req.key]), _int64(req.values[0])
        if have is None or want is None:
            return False
        return have > want if op == "Gt" else have < want
    return False


def _term_matches(term: Term, labels: Mapping[str, str], name: str) -> bool:
    if not term.valid:
        return False
    if term.expressions and not all(requirement_matches(r, labels) for r in term.expressions):
        return False
    if term.fields and name:
        for req in term.fields:
            equal = name == req.values[0]
            if equal != (req.operator == "In"):
                return False
    return True


@dataclass(frozen=True, slots=True)
class NodeFacts:
    """What the filters read of a node: its name, labels and taints."""

    name: str
    labels: tuple[tuple[str, str], ...] = ()
    taints: tuple[Taint, ...] = ()

    @property
    def group(self) -> tuple[tuple[tuple[str, str], ...], tuple[Taint, ...]]:
        """Nodes alike for every constraint that names neither the node nor its hostname."""
        return tuple(kv for kv in self.labels if kv[0] != HOSTNAME_LABEL), self.taints


@dataclass(frozen=True, slots=True)
class Topology:
    """A rule over a job's own trainers per domain (the nodes sharing `key`'s value):
    `apart` (required anti-affinity: at most one per domain), `spread` (DoNotSchedule:
    at most `skew` more than the emptiest counted domain) or `together` (required
    affinity: all in one domain)."""

    key: str
    kind: str
    skew: int = 1
    min_domains: int = 0
    honor_affinity: bool = True  # spread: only domains the pod's node affinity selects count
    honor_taints: bool = False  # spread: only domains whose taints the pod tolerates count


@dataclass(frozen=True, slots=True)
class PodConstraints:
    """A pod's tolerations, nodeSelector and required node affinity (None: it has none),
    and the topology rules over its own kind (`Topology`)."""

    tolerations: tuple[Toleration, ...] = ()
    node_selector: tuple[tuple[str, str], ...] = ()
    required: tuple[Term, ...] | None = None
    topology: tuple[Topology, ...] = ()

    def blocker(self, node: NodeFacts) -> str:
        """Why the pod may not land on `node` ("" when it may), in kube-scheduler's words."""
        taint = find_untolerated_taint(node.taints, self.tolerations)
        if taint is not None:
            return f"untolerated taint {{{taint.key}: {taint.value}}}"
        if not self.selects(node):
            return "didn't match Pod's node affinity/selector"
        return ""

    def selects(self, node: NodeFacts) -> bool:
        """`GetRequiredNodeAffinity(pod).Match(node)`: nodeSelector and required terms."""
        labels = dict(node.labels)
        if any(labels.get(key) != value for key, value in self.node_selector):
            return False
        if self.required is None:
            return True
        return any(_term_matches(term, labels, node.name) for term in self.required)

    @property
    def per_node(self) -> bool:
        """Whether the answer may differ between nodes of one `NodeFacts.group`."""
        if any(key == HOSTNAME_LABEL for key, _ in self.node_selector):
            return True
        for term in self.required or ():
            if term.fields or any(r.key == HOSTNAME_LABEL for r in term.expressions):
                return True
        return False

    def describe(self) -> str:
        """The constraint in a reason: `nvidia.com/gpu.product=A100`, or what narrows it."""
        parts = [f"{key}={value}" for key, value in self.node_selector]
        for term in self.required or ():
            parts.extend(
                f"{r.key} {r.operator} {','.join(r.values)}".strip() for r in term.expressions
            )
            parts.extend(f"{r.key} {r.operator} {','.join(r.values)}" for r in term.fields)
        return ", ".join(parts)


NO_CONSTRAINTS = PodConstraints()


def _strings(value: Any) -> tuple[str, ...]:
    return tuple(str(v) for v in value) if isinstance(value, list) else ()


def _requirements(items: Any) -> tuple[tuple[Requirement, ...], bool]:
    if items is None:
        return (), True
    if not isinstance(items, list):
        return (), False
    out = []
    for item in items:
        if not isinstance(item, Mapping):
            return (), False
        out.append(
            Requirement(str(item.get("key") or ""), str(item.get("operator") or ""),
                        _strings(item.get("values")))
        )
    return tuple(out), True


def _terms(selector: Any) -> tuple[Term, ...]:
    raw = selector.get("nodeSelectorTerms") if isinstance(selector, Mapping) else None
    terms = []
    for item in raw if isinstance(raw, list) else ():
        if not isinstance(item, Mapping):
            continue
        expressions, ok_e = _requirements(item.get("matchExpressions"))
        fields, ok_f = _requirements(item.get("matchFields"))
        if ok_e and ok_f and not expressions and not fields:
            continue  # an empty term is dropped: it matches nothing
        valid = (ok_e and ok_f and all(_requirement_valid(r) for r in expressions)
                 and all(_field_valid(r) for r in fields))
        terms.append(Term(expressions, fields, valid))
    return tuple(terms)


def _selects(selector: Any, labels: Mapping[str, str]) -> bool:
    """Whether a (pod) label selector selects a pod with `labels`; a null selector
    selects nothing."""
    if not isinstance(selector, Mapping):
        return False
    match = selector.get("matchLabels") or {}
    if not isinstance(match, Mapping) or any(labels.get(k) != v for k, v in match.items()):
        return False
    expressions, ok = _requirements(selector.get("matchExpressions"))
    return ok and all(requirement_matches(r, labels) for r in expressions)


def _self_problem(term: Mapping[str, Any], labels: Mapping[str, str]) -> str:
    """Why a pod affinity term or spread constraint does not count only pods of this
    kind in its own namespace ("" when it does)."""
    key = term.get("topologyKey")
    if key not in TOPOLOGY_KEYS:
        return (f"topologyKey {key!r}: the planner models {HOSTNAME_LABEL} and {ZONE_LABEL} "
                "only")
    if term.get("namespaces") or term.get("namespaceSelector") is not None:
        return "namespaces/namespaceSelector: the planner counts this namespace's pods only"
    if term.get("mismatchLabelKeys"):
        return "mismatchLabelKeys: the planner cannot model it"
    if any(k not in labels for k in term.get("matchLabelKeys") or ()):
        return "matchLabelKeys: only keys of the pod's own labels"
    if not _selects(term.get("labelSelector"), labels):
        return ("labelSelector must select the pods themselves (e.g. their edl.dev/job and "
                "edl.dev/role labels): the planner models rules among a job's own pods only")
    return ""


def topology_problems(
    spec: Mapping[str, Any] | None, labels: Mapping[str, str]
) -> list[tuple[tuple[str | int, ...], str]]:
    """Every required pod (anti-)affinity term and DoNotSchedule spread constraint of a
    pod spec the planner cannot model: (path under the spec, why)."""
    return _topology(spec, labels)[1]


def _topology(
    spec: Mapping[str, Any] | None, labels: Mapping[str, str]
) -> tuple[tuple[Topology, ...], list[tuple[tuple[str | int, ...], str]]]:
    rules: list[Topology] = []
    problems: list[tuple[tuple[str | int, ...], str]] = []
    if not isinstance(spec, Mapping):
        return (), []
    affinity = spec.get("affinity") or {}
    for field, kind in (("podAntiAffinity", "apart"), ("podAffinity", "together")):
        part = affinity.get(field) if isinstance(affinity, Mapping) else None
        terms = part.get("requiredDuringSchedulingIgnoredDuringExecution") if isinstance(
            part, Mapping) else None
        for index, term in enumerate(terms if isinstance(terms, list) else ()):
            if not isinstance(term, Mapping):
                continue
            where = ("affinity", field, "requiredDuringSchedulingIgnoredDuringExecution", index)
            problem = _self_problem(term, labels)
            if problem:
                problems.append((where, problem))
            else:
                rules.append(Topology(str(term["topologyKey"]), kind))
    spread = spec.get("topologySpreadConstraints")
    for index, item in enumerate(spread if isinstance(spread, list) else ()):
        if not isinstance(item, Mapping) or item.get("whenUnsatisfiable") != "DoNotSchedule":
            continue
        problem = _self_problem(item, labels)
        if problem:
            problems.append((("topologySpreadConstraints", index), problem))
            continue
        rules.append(Topology(
            str(item["topologyKey"]), "spread", skew=int(item.get("maxSkew") or 1),
            min_domains=int(item.get("minDomains") or 0),
            honor_affinity=item.get("nodeAffinityPolicy", "Honor") != "Ignore",
            honor_taints=item.get("nodeTaintsPolicy", "Ignore") == "Honor"))
    return tuple(rules), problems


def constraints_of(
    spec: Mapping[str, Any] | None, labels: Mapping[str, str] | None = None
) -> PodConstraints:
    """A pod spec's (dict) scheduling constraints; malformed parts constrain nothing more
    than the API server would have let through (a bad term matches no node). With the
    pod's `labels`, also the topology rules among pods like it (`Topology`)."""
    if not isinstance(spec, Mapping):
        return NO_CONSTRAINTS
    topology = _topology(spec, labels)[0] if labels is not None else ()
    tolerations = tuple(
        Toleration(str(t.get("key") or ""), str(t.get("operator") or ""),
                   str(t.get("value") or ""), str(t.get("effect") or ""))
        for t in spec.get("tolerations") or () if isinstance(t, Mapping)
    )
    selector = spec.get("nodeSelector") or {}
    pairs = tuple(sorted((str(k), str(v)) for k, v in selector.items())) if isinstance(
        selector, Mapping) else ()
    affinity = spec.get("affinity") or {}
    node_affinity = affinity.get("nodeAffinity") if isinstance(affinity, Mapping) else None
    required = None
    if isinstance(node_affinity, Mapping):
        raw = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
        if raw is not None:
            required = _terms(raw)
    if not tolerations and not pairs and required is None and not topology:
        return NO_CONSTRAINTS
    return PodConstraints(tolerations, pairs, required, topology)


def taints_of(spec: Mapping[str, Any] | None) -> tuple[Taint, ...]:
    """A Node spec's taints (malformed entries skipped)."""
    raw = (spec or {}).get("taints") if isinstance(spec, Mapping) else None
    return tuple(
        Taint(str(t.get("key") or ""), str(t.get("value") or ""), str(t.get("effect") or ""))
        for t in raw or () if isinstance(t, Mapping)
    )


def node_facts(node: Mapping[str, Any]) -> NodeFacts:
    """A Node dict's name, labels and taints."""
    metadata = node.get("metadata") or {}
    labels = metadata.get("labels") or {}
    pairs = tuple(sorted((str(k), str(v)) for k, v in labels.items())) if isinstance(
        labels, Mapping) else ()
    return NodeFacts(str(metadata.get("name") or ""), pairs, taints_of(node.get("spec")))
