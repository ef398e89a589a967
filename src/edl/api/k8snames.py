"""Kubernetes' naming rules (apimachinery's `validation.IsQualifiedName` and friends), pure.

Why here: a TrainingJob carries Kubernetes pod fields (node selectors, tolerations, labels,
...), and a wrong key must be named by `edl validate` before the API server refuses the
pods. Each rule is a regular expression that both Python and the API server's CEL (RE2)
can run, so `JobParser.validate` and the generated CRD reject exactly the same values;
each `*_problem` function says why a value breaks its rule, or None.
"""

from __future__ import annotations

import re

__all__ = [
    "DNS1123_SUBDOMAIN",
    "ENV_NAME",
    "HUGEPAGES",
    "LABEL_VALUE",
    "MAX_ENV_NAME",
    "MAX_LABEL_VALUE",
    "MAX_QUALIFIED_NAME",
    "MAX_SUBDOMAIN",
    "QUALIFIED_LENGTHS",
    "QUALIFIED_NAME",
    "STANDARD_RESOURCES",
    "cel_string",
    "env_name_problem",
    "is_extended_resource",
    "label_value_problem",
    "qualified_name_problem",
    "resource_name_cel",
    "resource_name_problem",
    "subdomain_problem",
]

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN = rf"{_LABEL}(\.{_LABEL})*"
# a name part: at most 63 characters, alphanumerics at both ends, '-', '_', '.' inside
_NAME_PART = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
MAX_SUBDOMAIN = 253
MAX_LABEL_VALUE = 63
MAX_QUALIFIED_NAME = MAX_SUBDOMAIN + 1 + 63  # prefix "/" name
# no Kubernetes limit; a bound lets the API server price the CRD's rule on env names
MAX_ENV_NAME = 256

DNS1123_SUBDOMAIN = rf"^{_SUBDOMAIN}$"
# label keys, annotation keys, toleration keys, topology keys: [prefix/]name
QUALIFIED_NAME = rf"^({_SUBDOMAIN}/)?{_NAME_PART}$"
# ... whose prefix is at most 253 characters (a second expression: RE2 has no look-ahead)
QUALIFIED_LENGTHS = r"^([^/]{1,253}/)?[^/]{1,63}$"
LABEL_VALUE = r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$"
# C_IDENTIFIER-like, as every Kubernetes version accepts (1.34 relaxed it further)
ENV_NAME = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"


def _show(value: str) -> str:
    return repr(value if len(value) <= 80 else value[:77] + "...")


def qualified_name_problem(value: str) -> str | None:
    """Why `value` is not a label/annotation key (a qualified name), or None."""
    if re.match(QUALIFIED_NAME, value) and re.match(QUALIFIED_LENGTHS, value):
        return None
    return (
        "must be a qualified name: an optional DNS subdomain prefix of at most 253 characters "
        "and '/', then a name of at most 63 letters, digits, '-', '_' or '.' starting and "
        f"ending with a letter or digit (got {_show(value)})"
    )


def label_value_problem(value: str) -> str | None:
    """Why `value` is not a label value (also a nodeSelector value), or None."""
    if len(value) > MAX_LABEL_VALUE:
        return f"must be at most {MAX_LABEL_VALUE} characters (got {len(value)})"
    if re.match(LABEL_VALUE, value):
        return None
    return (
        "must be empty or letters, digits, '-', '_' or '.', starting and ending with a letter "
        f"or digit (got {_show(value)})"
    )


def subdomain_problem(value: str) -> str | None:
    """Why `value` is not a DNS-1123 subdomain (object names such as a PriorityClass), or None."""
    if len(value) > MAX_SUBDOMAIN:
        return f"must be at most {MAX_SUBDOMAIN} characters (got {len(value)})"
    if re.match(DNS1123_SUBDOMAIN, value):
        return None
    return (
        "must be a DNS-1123 subdomain: lowercase letters, digits, '-' and '.', starting and "
        f"ending with a letter or digit (got {_show(value)})"
    )


def env_name_problem(value: str) -> str | None:
    """Why `value` is not an environment variable name, or None."""
    if len(value) > MAX_ENV_NAME:
        return f"must be at most {MAX_ENV_NAME} characters (got {len(value)})"
    if re.match(ENV_NAME, value):
        return None
    return (
        "must be letters, digits, '_', '-' or '.', not starting with a digit "
        f"(got {_show(value)})"
    )


def cel_string(text: str) -> str:
    """`text` as a CEL string literal (for x-kubernetes-validations rules)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


# container resource names: the standard ones, huge pages, or a domain-prefixed extended
# resource (nvidia.com/gpu, amd.com/gpu, ...) outside kubernetes.io; the legacy GPU name is
# accepted because edl rewrites it to nvidia.com/gpu
STANDARD_RESOURCES = ("cpu", "memory", "ephemeral-storage", "alpha.kubernetes.io/nvidia-gpu")
HUGEPAGES = r"^hugepages-[1-9][0-9]*[KMGTPE]i$"
_RESERVED_DOMAIN = r"^([^/]*[.])?kubernetes[.]io/"


def is_extended_resource(name: str) -> bool:
    """A domain-prefixed resource outside kubernetes.io (Kubernetes' IsExtendedResourceName)."""
    return ("/" in name and not re.match(_RESERVED_DOMAIN, name)
            and not name.startswith("requests."))


def resource_name_problem(name: str) -> str | None:
    """Why `name` cannot be a container resource, or None."""
    if name in STANDARD_RESOURCES or re.match(HUGEPAGES, name):
        return None
    if is_extended_resource(name) and qualified_name_problem(name) is None:
        return None
    return (
        "must be cpu, memory, ephemeral-storage, hugepages-<size> or an extended resource "
        f"named <domain>/<name> outside kubernetes.io, such as nvidia.com/gpu (got {_show(name)})"
    )


def resource_name_cel(var: str) -> str:
    """`resource_name_problem(var) is None` in CEL."""
    standard = ", ".join(cel_string(name) for name in STANDARD_RESOURCES)
    return (
        f"{var} in [{standard}] || {var}.matches({cel_string(HUGEPAGES)}) || "
        f"({var}.contains('/') && !{var}.matches({cel_string(_RESERVED_DOMAIN)}) && "
        f"!{var}.startsWith('requests.') && {var}.matches({cel_string(QUALIFIED_NAME)}) && "
        f"{var}.matches({cel_string(QUALIFIED_LENGTHS)}))"
    )
