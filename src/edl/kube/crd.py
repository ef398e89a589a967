"""The `trainingjobs.edl.dev` CustomResourceDefinition, generated from the TrainingJob model.

Why generated: the pydantic model in `edl.api.trainingjob` is the one source of
truth for which fields exist and their types; this module turns it into a
structural OpenAPI v3 schema and adds what only the API server can enforce
(minimums, defaults, the CEL rule min <= max), the status and scale
subresources, the short name and the printer columns.

Scale subresource: `kubectl scale tj NAME --replicas=N` writes
`spec.trainer.min-instance`, the number of trainers the job is guaranteed. The
autoscaler keeps the trainer count in [min-instance, max-instance], so the
count becomes at least N; the CEL rule rejects N > max-instance and the
schema's minimum rejects N < 1. `status.replicas` reports the trainer Job's
current parallelism (what `kubectl get --subresource=scale` shows as status) and
`status.selector` the trainer pods' label selector (`labelSelectorPath`, which an
HPA needs). The CRD's only category is `edl` (`kubectl get edl`): `all` would make
`kubectl delete all` delete training jobs.
"""

from __future__ import annotations

import copy
from typing import Any

from edl.api.k8snames import resource_name_cel
from edl.api.trainingjob import MAX_RESOURCES, TrainingJob, TrainingJobStatus
from edl.jobparser.validation import INT32_MAX
from edl.kube.crd_rules import (
    FIELD_RULES,
    LIST_MAPS,
    MODEL_RULES,
    QUANTITY_PATTERN,
    REQUIRED,
    VALIDATIONS,
)

GROUP = "edl.dev"
VERSION = "v1"
PLURAL = "trainingjobs"
SINGULAR = "trainingjob"
KIND = "TrainingJob"
SHORT_NAMES = ["tj"]
CRD_NAME = f"{PLURAL}.{GROUP}"

API_VERSION_DESCRIPTION = (
    f"{GROUP}/{VERSION}: the only version a cluster serves. Files in the original "
    "paddlepaddle.org/v1 (which edl run and edl validate read) apply once their "
    f"apiVersion is changed to {GROUP}/{VERSION}; the spec is the same.")

# -- model JSON schema -> structural schema --------------------------------------------


def _unwrap_optional(node: dict[str, Any]) -> dict[str, Any]:
    """`anyOf: [X, null]` -> X (absence, not null, is how Kubernetes says 'unset')."""
    options = node.get("anyOf")
    if options:
        concrete = [o for o in options if o.get("type") != "null"]
        if len(concrete) == 1:
            merged = {k: v for k, v in node.items() if k != "anyOf"}
            merged.update(concrete[0])
            return merged
    return node


def _plain(description: str) -> str:
    """A docstring or field description as `kubectl explain` shows it: one paragraph, no
    Markdown backticks."""
    return " ".join(description.replace("`", "").split())


def _quantity() -> dict[str, Any]:
    # The shape controller-gen emits for resource.Quantity; `pattern` only constrains
    # strings and `minimum` only integers (JSON-schema semantics).
    return {
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "x-kubernetes-int-or-string": True,
        "pattern": QUANTITY_PATTERN,
        "minimum": 0,
    }


# JSON-schema keywords a structural schema keeps as they are, per type
_CONSTRAINTS = {
    "string": ("minLength", "maxLength", "pattern", "allOf"),
    "integer": ("minimum", "maximum", "format"),
    "array": ("minItems", "maxItems"),
    "object": ("maxProperties",),
}


def _constraints(node: dict[str, Any], kind: str) -> dict[str, Any]:
    """The node's own limits (from the model: Field bounds, WithJsonSchema) and CEL rules."""
    out = {key: node[key] for key in _CONSTRAINTS.get(kind, ()) if key in node}
    if "x-kubernetes-validations" in node:
        out["x-kubernetes-validations"] = copy.deepcopy(node["x-kubernetes-validations"])
    return out


def _resource_list() -> dict[str, Any]:
    return {
        "type": "object", "maxProperties": MAX_RESOURCES, "additionalProperties": _quantity(),
        "x-kubernetes-validations": [{
            "rule": f"self.all(k, {resource_name_cel('k')})",
            "message": "every key must be cpu, memory, ephemeral-storage, hugepages-<size> or "
                       "an extended resource <domain>/<name> outside kubernetes.io",
            "reason": "FieldValueInvalid",
        }],
    }


def _convert(
    node: dict[str, Any], defs: dict[str, Any], path: str, def_name: str | None
) -> dict[str, Any]:
    node = _unwrap_optional(node)
    ref = node.get("$ref")
    if ref:
        name = ref.rsplit("/", 1)[-1]
        model = _convert(defs[name], defs, path, name)
        if node.get("description"):  # the field's own words over its type's docstring
            model["description"] = _plain(node["description"])
        if name in MODEL_RULES:
            model.setdefault("x-kubernetes-validations", []).extend(
                copy.deepcopy(MODEL_RULES[name]))
        return model
    description = node.get("description")
    kind = node.get("type")
    out: dict[str, Any]
    if "enum" in node or "const" in node:
        values = node.get("enum") or [node["const"]]
        out = {"type": "string", "enum": list(values)}
    elif kind == "object" and "properties" in node:
        out = {"type": "object", "properties": {}}
        for prop, sub in node["properties"].items():
            sub_path = f"{path}.{prop}" if path else prop
            out["properties"][prop] = _convert(sub, defs, sub_path, None)
        if node.get("required"):
            out["required"] = list(node["required"])
    elif kind == "object":
        values = node.get("additionalProperties")
        if def_name is None and path.rsplit(".", 1)[-1] in {"limits", "requests"}:
            out = _resource_list()
        elif isinstance(values, dict) and values.get("type") in {"string", "integer", "boolean"}:
            value = {"type": values["type"], **_constraints(values, values["type"])}
            out = {"type": "object", "additionalProperties": value, **_constraints(node, kind)}
        else:
            out = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    elif kind == "array":
        items = _unwrap_optional(node.get("items") or {})
        item_schema = (
            _convert(items, defs, f"{path}[]", None)
            if "$ref" in items or items.get("type") not in (None, "object")
            else {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        )
        out = {"type": "array", "items": item_schema, **_constraints(node, kind)}
    elif kind in {"string", "integer", "boolean", "number"}:
        out = {"type": kind, **_constraints(node, kind)}
    else:  # pragma: no cover - a model type this generator does not know yet
        raise ValueError(f"cannot express {path or '<root>'} ({node}) in a structural schema")
    if description:
        out["description"] = _plain(description)
    out.update(FIELD_RULES.get(path, {}))
    if path in REQUIRED:
        out["required"] = REQUIRED[path]
    if path in VALIDATIONS:
        out.setdefault("x-kubernetes-validations", []).extend(copy.deepcopy(VALIDATIONS[path]))
    if path in LIST_MAPS:
        out["x-kubernetes-list-type"] = "map"
        out["x-kubernetes-list-map-keys"] = [LIST_MAPS[path]]
    return out


def _int_field(description: str, fmt: str = "int32") -> dict[str, Any]:
    top = INT32_MAX if fmt == "int32" else None
    return {"type": "integer", "format": fmt, "minimum": 0, "description": description,
            **({"maximum": top} if top is not None else {})}


CONDITION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "One aspect of the job's state (Ready, Scaling, Complete, Failed, "
                   "Suspended, CheckpointFailing, Stalled), with why.",
    "required": ["type", "status"],
    "properties": {
        "type": {"type": "string",
                 "enum": ["Ready", "Scaling", "Complete", "Failed", "Suspended",
                          "CheckpointFailing", "Stalled"],
                 "description": "Ready (running or succeeded), Scaling (trainers running "
                                "differ from desired), Complete (the trainers finished the "
                                "work), Failed, Suspended (its trainer Job is held, e.g. "
                                "by Kueue), CheckpointFailing (a pserver, or a collective "
                                "job's rank 0, cannot save its checkpoint: its state is at "
                                "risk) or Stalled (trainers run but progress does not "
                                "move)."},
        "status": {"type": "string", "enum": ["True", "False", "Unknown"],
                   "description": "True, False or Unknown."},
        "reason": {"type": "string",
                   "description": "One CamelCase word saying why, e.g. ScalingUp, "
                                  "InvalidSpec, TrainerJobFailed."},
        "message": {"type": "string", "description": "The reason in words."},
        "lastTransitionTime": {"type": "string", "format": "date-time",
                               "description": "When status last changed."},
        "observedGeneration": {"type": "integer", "format": "int64", "minimum": 0,
                               "description": "The spec generation this condition is "
                                              "about."},
    },
}


def status_schema() -> dict[str, Any]:
    """The status the controller writes: the model's state/message plus Kubernetes bookkeeping."""
    model_status = TrainingJob.model_json_schema(by_alias=True)["$defs"]["TrainingJobStatus"]
    state = _unwrap_optional(model_status["properties"]["state"])
    message = _unwrap_optional(model_status["properties"]["message"])
    return {
        "type": "object",
        "description": _plain(TrainingJobStatus.__doc__ or ""),
        "properties": {
            "state": {"type": "string", "enum": state["enum"],
                      "description": _plain(state["description"])},
            "message": {"type": "string", "description": _plain(message["description"])},
            "waiting": {"type": "string",
                        "description": "Why the job has fewer trainers running than "
                                       "desired, or why it has not started (empty when "
                                       "nothing waits); the WAITING column of kubectl get."},
            "observedGeneration": _int_field(
                "The spec generation (metadata.generation) the controller last acted on.",
                "int64"),
            "replicas": _int_field(
                "Trainers the job has now (the trainer Job's parallelism, set by the "
                "autoscaler): the scale subresource's status.replicas. kubectl scale "
                "--replicas sets spec.trainer.min-instance, the floor under it."),
            "selector": {"type": "string",
                         "description": "Label selector of the trainer pods (the scale "
                                        "subresource's, which an HPA reads)."},
            "trainers": {
                "type": "object",
                "description": "Trainer counts: desired (parallelism), running, pending.",
                "properties": {
                    "desired": _int_field("Trainers the autoscaler asks for (parallelism)."),
                    "running": _int_field("Trainer pods running."),
                    "pending": _int_field("Trainer pods created but not running yet."),
                },
            },
            "plan": {
                "type": "object",
                "description": "The autoscaler's last decision: trainer target and why.",
                "properties": {
                    "target": _int_field("Trainers the autoscaler's last decision set."),
                    "reason": {"type": "string",
                               "description": "Why: what bounds the job (a quota, the nodes "
                                              "it may use, its fair share)."},
                },
            },
            "conditions": {
                "type": "array",
                "description": "Ready, Scaling, Complete, Failed and Suspended, and on "
                               "Kubernetes CheckpointFailing and Stalled, each with a "
                               "reason and message (`kubectl wait "
                               "--for=condition=Complete`).",
                "items": copy.deepcopy(CONDITION_SCHEMA),
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["type"],
            },
        },
    }


def openapi_schema() -> dict[str, Any]:
    """The structural openAPIV3Schema of a TrainingJob."""
    model = TrainingJob.model_json_schema(by_alias=True, mode="validation")
    defs = model.get("$defs", {})
    spec = _convert(model["properties"]["spec"], defs, "spec", None)
    schema: dict[str, Any] = {
        "type": "object",
        "description": ("An elastic training job: trainers, parameter servers and a master. "
                        + API_VERSION_DESCRIPTION),
        "properties": {
            "apiVersion": {"type": "string", "description": API_VERSION_DESCRIPTION},
            "kind": {"type": "string", "description": "TrainingJob."},
            # No description: the API server allows nothing on metadata but name and
            # generateName (kubectl explain shows ObjectMeta's own). `name` is declared so
            # the name rule can point at it (fieldPath).
            "metadata": {"type": "object", "properties": {"name": {"type": "string"}}},
            "spec": spec,
            "status": status_schema(),
        },
        "required": REQUIRED[""],
        "x-kubernetes-validations": copy.deepcopy(VALIDATIONS[""]),
    }
    return schema


def printer_columns() -> list[dict[str, Any]]:
    """`kubectl get tj`: state, trainer counts and what the job waits for; `-o wide` adds
    pending trainers, the image and the status message."""
    return [
        {"name": "State", "type": "string", "jsonPath": ".status.state"},
        {"name": "Running", "type": "integer", "jsonPath": ".status.trainers.running",
         "description": "Trainer pods running"},
        {"name": "Desired", "type": "integer", "jsonPath": ".status.trainers.desired",
         "description": "Trainer parallelism the autoscaler set"},
        {"name": "Min", "type": "integer", "jsonPath": ".spec.trainer.min-instance",
         "description": "Trainers guaranteed (kubectl scale --replicas sets it)"},
        {"name": "Max", "type": "integer", "jsonPath": ".spec.trainer.max-instance",
         "description": "Most trainers the autoscaler gives the job"},
        {"name": "Waiting", "type": "string", "jsonPath": ".status.waiting",
         "description": "What the missing trainers wait for (empty: none missing)"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        {"name": "Pending", "type": "integer", "jsonPath": ".status.trainers.pending",
         "description": "Trainer pods not running yet", "priority": 1},
        {"name": "Image", "type": "string", "jsonPath": ".spec.image", "priority": 1},
        {"name": "Message", "type": "string", "jsonPath": ".status.message",
         "description": "Why the job is in its state", "priority": 1},
    ]


def build_crd() -> dict[str, Any]:
    """The whole CustomResourceDefinition as a plain dict (what `edl crd` prints)."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD_NAME, "labels": {"app.kubernetes.io/name": "edl"}},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "plural": PLURAL,
                "singular": SINGULAR,
                "kind": KIND,
                "listKind": f"{KIND}List",
                "shortNames": list(SHORT_NAMES),
                # not "all": `kubectl delete all` must not take training jobs along
                "categories": ["edl"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": openapi_schema()},
                    "subresources": {
                        "status": {},
                        "scale": {
                            "specReplicasPath": ".spec.trainer.min-instance",
                            "statusReplicasPath": ".status.replicas",
                            # an HPA finds the trainer pods through this selector
                            "labelSelectorPath": ".status.selector",
                        },
                    },
                    "additionalPrinterColumns": printer_columns(),
                }
            ],
        },
    }
