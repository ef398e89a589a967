"""The CRD's validation: per-field constraints and defaults, and CEL rules, taken from the
JobParser's own constants so the API server and `edl validate` judge a job alike."""

from __future__ import annotations

from typing import Any

from edl.api.k8smodel import cel_rules
from edl.api.k8snames import cel_string
from edl.jobparser import (
    DEFAULT_PASSES,
    DEFAULT_PORT,
    DEFAULT_PORTS_NUM,
    DEFAULT_PORTS_NUM_FOR_SPARSE,
)
from edl.jobparser.collective import (
    DEFAULT_MAX_RESTARTS,
    DEFAULT_NPROC_PER_NODE,
)
from edl.jobparser.manifests import EDL_ENV_NAMES
from edl.jobparser.podchecks import EDL_LABEL_PREFIX
from edl.jobparser.validation import (
    DEFAULT_PSERVERS,
    ETCD_ENDPOINTS_PATTERN,
    INT_BOUNDS,
    MAX_NAME_LENGTH,
    MAX_PORT,
    ROLE_SUFFIXES,
)

# A Kubernetes quantity that is not negative (the model rejects negative quantities too).
QUANTITY_PATTERN = (
    r"^\+?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)

VOLUME_NAME = {"minLength": 1, "maxLength": 63, "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"}


def _cel(field: str) -> str:
    """A CEL identifier for a field name, escaped as Kubernetes does.

    Only '__', '.', '-' and '/' are escaped; a single '_' stays (``fault_tolerant``).
    """
    return (field.replace("__", "__underscores__").replace(".", "__dot__")
            .replace("-", "__dash__").replace("/", "__slash__"))


MIN = _cel("min-instance")
MAX = _cel("max-instance")


# `kubectl scale tj NAME --replicas=N` writes spec.trainer.min-instance (the scale
# subresource): the trainer rules say so, since a refused scale shows only their message.
SCALE_NOTE = " (kubectl scale --replicas sets spec.trainer.min-instance)"


def _min_max_rule(role: str) -> dict[str, str]:
    return {
        "rule": f"!has(self.{MAX}) || self.{MIN} <= self.{MAX}",
        "message": (f"spec.{role}.min-instance must be <= spec.{role}.max-instance"
                    + (SCALE_NOTE if role == "trainer" else "")),
        "fieldPath": ".max-instance",
        "reason": "FieldValueInvalid",
    }


# The same rules JobParser.validate applies, in the form the API server can enforce.
TRAINER_RULES = [_min_max_rule("trainer")]
PSERVER_RULES = [_min_max_rule("pserver")]
SPEC_RULES = [{
    "rule": (f"self.fault_tolerant || !has(self.trainer.{MAX}) "
             f"|| self.trainer.{MAX} == self.trainer.{MIN}"),
    "message": ("spec.trainer.max-instance must equal min-instance "
                "unless spec.fault_tolerant is true: a job that is not fault-tolerant has a "
                "fixed trainer count, so kubectl scale --replicas (which sets min-instance) "
                "cannot change it; edit both min-instance and max-instance"),
    "fieldPath": ".trainer.max-instance",
    "reason": "FieldValueInvalid",
}, {
    # Defaults are applied before validation, so the three fields are present.
    "rule": (f"!has(self.port) || !has(self.ports_num) || !has(self.ports_num_for_sparse) "
             f"|| self.port + self.ports_num + self.ports_num_for_sparse - 1 <= {MAX_PORT}"),
    "message": f"spec.port + ports_num + ports_num_for_sparse - 1 must be <= {MAX_PORT}",
    "fieldPath": ".port",
    "reason": "FieldValueInvalid",
}]
_NAME_LIMIT = MAX_NAME_LENGTH - max(len(s) for s in ROLE_SUFFIXES)
ROOT_RULES = [{
    "rule": (f"self.metadata.name.size() <= {_NAME_LIMIT} && "
             "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')"),
    "message": (f"metadata.name must be a DNS-1035 label of at most {_NAME_LIMIT} characters "
                "(lowercase letters, digits and '-', starting with a letter), so that the "
                "children's names fit"),
    # without a fieldPath the API server reports the root rule at "<nil>"
    "fieldPath": ".metadata.name",
    "reason": "FieldValueInvalid",
}]
# Constraints and defaults per field path (dot-joined, original spellings). The
# structure comes from the model; the values from edl.jobparser's validation.
FIELD_RULES: dict[str, dict[str, Any]] = {
    # no default: the controller's --image applies to a job that names no image
    "spec.image": {"minLength": 1, "pattern": r"\S"},
    "spec.master.etcd-image": {"minLength": 1, "pattern": r"\S"},
    "spec.port": {"default": DEFAULT_PORT},
    "spec.ports_num": {"default": DEFAULT_PORTS_NUM},
    "spec.ports_num_for_sparse": {"default": DEFAULT_PORTS_NUM_FOR_SPARSE},
    "spec.passes": {"default": DEFAULT_PASSES},
    "spec.fault_tolerant": {"default": False},
    "spec.hostNetwork": {"default": False},
    "spec.trainer.entrypoint": {"minLength": 1, "pattern": r"\S"},
    "spec.trainer.workspace": {"default": ""},
    "spec.pserver.min-instance": {"default": DEFAULT_PSERVERS},
    "spec.master.etcd-endpoint": {"pattern": ETCD_ENDPOINTS_PATTERN},
    # a volume's name (a DNS-1123 label); that spec.volumes has it, the JobParser checks
    "spec.master.etcd-volume": VOLUME_NAME,
    "spec.pserver.checkpoint-volume": VOLUME_NAME,
    "spec.collective.nproc-per-node": {"minimum": 1, "default": DEFAULT_NPROC_PER_NODE},
    "spec.collective.world-size-multiple": {"minimum": 1},
    # no schema default: it depends on `live` (the JobParser fills it in)
    "spec.collective.resize-cooldown": {"minimum": 0},
    "spec.collective.live": {"default": False},
    "spec.collective.max-restarts": {"minimum": 0, "default": DEFAULT_MAX_RESTARTS},
}
for _role in ("master", "pserver", "trainer"):
    FIELD_RULES[f"spec.{_role}.image"] = {"minLength": 1, "pattern": r"\S"}
for _path, (_low, _high) in INT_BOUNDS.items():  # the JobParser's bounds, as the schema's
    FIELD_RULES[_path] = {
        "format": "int32", "minimum": _low, "maximum": _high, **FIELD_RULES.get(_path, {})
    }
REQUIRED: dict[str, list[str]] = {
    "": ["spec"],
    "spec": ["trainer"],
    "spec.trainer": ["entrypoint", "min-instance"],
}
VALIDATIONS: dict[str, list[dict[str, str]]] = {
    "": ROOT_RULES,
    "spec": SPEC_RULES,
    "spec.trainer": TRAINER_RULES,
    "spec.pserver": PSERVER_RULES,
}
# edl's own rules on the roles' pod fields (edl.jobparser.podchecks)
_RESERVED_ENV = ", ".join(cel_string(name) for name in sorted(EDL_ENV_NAMES))
LIST_MAPS: dict[str, str] = {}  # list path -> its key (the API server refuses duplicates)
for _role in ("master", "pserver", "trainer"):
    VALIDATIONS[f"spec.{_role}.labels"] = [{
        "rule": f"self.all(k, !k.startsWith({cel_string(EDL_LABEL_PREFIX)}))",
        "message": f"labels under {EDL_LABEL_PREFIX} are edl's own",
        "reason": "FieldValueInvalid",
    }]
    VALIDATIONS[f"spec.{_role}.env"] = [{
        "rule": f"self.all(e, !(e.name in [{_RESERVED_ENV}]))",
        "message": "variables edl sets itself (EDL_JOB_NAME, EDL_PORT, ...) cannot be redefined",
        "reason": "FieldValueInvalid",
    }]
    LIST_MAPS[f"spec.{_role}.env"] = "name"
MODEL_RULES = cel_rules()
