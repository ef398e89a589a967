"""Which edl installation a controller process is, and which TrainingJobs it runs.

Why: two installations on one cluster (a cluster-wide and a namespaced one, or one per
tenant) would otherwise both run every job. A TrainingJob names the installation that
runs it with the label ``edl.dev/installation``; without the label the default
installation runs it. The installation's name is the trainer Job's ``spec.managedBy``
(``edl.dev/<name>``) and the ``edl.dev/created-by`` mark of the pods it creates, so a
trainer Job or pod of another installation is never claimed. One installation per
process: ``edl controller --installation`` (or ``$EDL_INSTALLATION``) sets it at start.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

DEFAULT_INSTALLATION = "trainer-controller"
LABEL_INSTALLATION = "edl.dev/installation"
ENV_INSTALLATION = "EDL_INSTALLATION"
MANAGED_BY_PREFIX = "edl.dev/"
# spec.managedBy is at most 63 characters; the name is also a label value (a DNS label)
MAX_INSTALLATION = 63 - len(MANAGED_BY_PREFIX)
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")

_current = [DEFAULT_INSTALLATION]


def installation_problem(name: str) -> str | None:
    """Why `name` cannot name an installation, or None."""
    if not _NAME.match(name):
        return (f"installation name {name!r} must be lower-case letters, digits and '-', "
                "starting and ending with a letter or digit")
    if len(name) > MAX_INSTALLATION:
        return f"installation name {name!r} is longer than {MAX_INSTALLATION} characters"
    return None


def set_installation(name: str) -> None:
    """Make this process installation `name` (ValueError if it is not a valid name)."""
    problem = installation_problem(name)
    if problem:
        raise ValueError(problem)
    _current[0] = name


def current() -> str:
    """This process's installation (the created-by mark of the pods it creates)."""
    return _current[0]


def managed_by(name: str | None = None) -> str:
    """The trainer Job's ``spec.managedBy`` for installation `name` (default: this one)."""
    return MANAGED_BY_PREFIX + (name or current())


def installation_of(body: Mapping[str, Any]) -> str:
    """The installation a TrainingJob manifest asks for (its label, else the default)."""
    labels = (body.get("metadata") or {}).get("labels") or {}
    value = labels.get(LABEL_INSTALLATION) if isinstance(labels, Mapping) else None
    return value if isinstance(value, str) and value else DEFAULT_INSTALLATION


def runs(body: Mapping[str, Any]) -> bool:
    """Whether this process's installation runs the TrainingJob `body`."""
    return installation_of(body) == current()
