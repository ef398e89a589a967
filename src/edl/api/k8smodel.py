"""The building blocks of edl's Kubernetes sub-objects: checked strings, maps, rules.

Why: a TrainingJob carries Kubernetes pod fields per role (`edl.api.podscheduling`,
`edl.api.podcontainer`), and a wrong value should be named by `edl validate` and
refused by the CRD alike. Each string type is checked by a Python function (pydantic)
and carries the JSON schema the CRD generator copies; each cross-field `Rule` is a
Python predicate and the same rule in CEL (`x-kubernetes-validations`) over one
message, so `JobParser.validate` and the API server reject the same objects.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar

from annotated_types import MaxLen
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    StrictStr,
    WithJsonSchema,
    model_validator,
)

from edl.api.k8snames import (
    DNS1123_SUBDOMAIN,
    ENV_NAME,
    LABEL_VALUE,
    MAX_ENV_NAME,
    MAX_LABEL_VALUE,
    MAX_QUALIFIED_NAME,
    MAX_SUBDOMAIN,
    QUALIFIED_LENGTHS,
    QUALIFIED_NAME,
    cel_string,
    env_name_problem,
    label_value_problem,
    qualified_name_problem,
    subdomain_problem,
)

__all__ = [
    "MAX_ITEMS",
    "MAX_MAP",
    "MAX_TERMS",
    "AnnotationMap",
    "EnvName",
    "Int64",
    "K8sObject",
    "LabelMap",
    "LabelValue",
    "NonNegative64",
    "QualifiedName",
    "Rule",
    "Subdomain",
    "Weight",
    "cel_rules",
]

# Bounds on list and map sizes: far above what a pod needs, and what lets the API
# server bound the cost of the CRD's CEL rules (it refuses a CRD whose rules could
# cost more than its budget on the largest object).
MAX_ITEMS = 64
MAX_TERMS = 16
MAX_MAP = 64


def _checker(problem: Callable[[str], str | None]) -> AfterValidator:
    """A pydantic validator raising `problem`'s message (the CRD carries the same rule)."""

    def check(value: str) -> str:
        why = problem(value)
        if why:
            raise ValueError(why)
        return value

    return AfterValidator(check)


_KEY_RULE = (
    f"self.matches({cel_string(QUALIFIED_NAME)}) && self.matches({cel_string(QUALIFIED_LENGTHS)})"
)
_KEY_MESSAGE = "must be a qualified name ([prefix/]name, prefix <= 253, name <= 63 characters)"
# two patterns (allOf: a structural schema allows value checks there): no CEL rule, whose
# cost the API server would count once per list item the string could be in
QualifiedName = Annotated[StrictStr, _checker(qualified_name_problem), WithJsonSchema({
    "type": "string", "maxLength": MAX_QUALIFIED_NAME, "pattern": QUALIFIED_NAME,
    "allOf": [{"pattern": QUALIFIED_LENGTHS}],
})]
LabelValue = Annotated[StrictStr, _checker(label_value_problem), WithJsonSchema(
    {"type": "string", "maxLength": MAX_LABEL_VALUE, "pattern": LABEL_VALUE})]
Subdomain = Annotated[StrictStr, _checker(subdomain_problem), WithJsonSchema(
    {"type": "string", "maxLength": MAX_SUBDOMAIN, "pattern": DNS1123_SUBDOMAIN})]
EnvName = Annotated[StrictStr, _checker(env_name_problem), WithJsonSchema(
    {"type": "string", "minLength": 1, "maxLength": MAX_ENV_NAME, "pattern": ENV_NAME})]


def _key_map(value_schema: dict[str, Any], value_type: Any) -> Any:
    """A map whose keys are qualified names (labels, annotations, nodeSelector)."""
    schema = {
        "type": "object", "maxProperties": MAX_MAP, "additionalProperties": value_schema,
        "x-kubernetes-validations": [{
            "rule": f"self.all(k, {_KEY_RULE.replace('self.', 'k.')})",
            "message": f"every key {_KEY_MESSAGE}",
            "reason": "FieldValueInvalid",
        }],
    }
    return Annotated[dict[QualifiedName, value_type], MaxLen(MAX_MAP), WithJsonSchema(schema)]


LabelMap = _key_map({"type": "string", "maxLength": MAX_LABEL_VALUE, "pattern": LABEL_VALUE},
                    LabelValue)
AnnotationMap = _key_map({"type": "string"}, StrictStr)
# int64 as the API server checks it (format int64: a bound of 2^63 - 1 would not survive
# the API server's float64 `maximum`)
Int64 = Annotated[StrictInt, Field(ge=-(2**63), le=2**63 - 1),
                  WithJsonSchema({"type": "integer", "format": "int64"})]
NonNegative64 = Annotated[StrictInt, Field(ge=0, le=2**63 - 1),
                          WithJsonSchema({"type": "integer", "format": "int64", "minimum": 0})]
Weight = Annotated[StrictInt, Field(ge=1, le=100)]


@dataclass(frozen=True)
class Rule:
    """One cross-field rule: CEL for the API server, `holds` for pydantic, one message."""

    cel: str
    message: str
    field: str  # what the API server's error names (fieldPath, relative to the object)
    holds: Callable[[Any], bool]


class K8sObject(BaseModel):
    """A core/v1 sub-object: Kubernetes' field names only, unknown fields are errors."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    rules: ClassVar[tuple[Rule, ...]] = ()

    @model_validator(mode="after")
    def _check_rules(self) -> K8sObject:
        broken = [rule.message for rule in type(self).rules if not rule.holds(self)]
        if broken:
            raise ValueError("; ".join(broken))
        return self


def cel_rules() -> dict[str, list[dict[str, str]]]:
    """CEL rules per model name (the CRD generator looks models up by their schema name)."""
    found: dict[str, list[dict[str, str]]] = {}
    pending: list[type[K8sObject]] = [K8sObject]
    while pending:
        model = pending.pop()
        pending.extend(model.__subclasses__())
        if model.rules:
            found[model.__name__] = [
                {"rule": r.cel, "message": r.message, "fieldPath": f".{r.field}",
                 "reason": "FieldValueInvalid"} for r in model.rules]
    return found
