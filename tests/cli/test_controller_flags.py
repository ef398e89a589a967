"""`edl controller` with no flags acts as deploy/controller.yaml's Deployment does.

Each flag the Deployment passes must be the command's default, except where the two
places differ on purpose: `--listen` (the pod serves probes and scraping on every
address, a laptop on localhost only), and the two values the pod fills in from its own
metadata, which mean what the defaults mean (`--identity=$(POD_NAME)`: the default
identity is $POD_NAME; `--lease-namespace=$(POD_NAMESPACE)`: the Deployment's namespace,
which is the default Lease namespace)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import yaml

from edl.cli.controller import controller

ROOT = Path(__file__).resolve().parents[2]
ON_PURPOSE = {"--listen"}


def deployment() -> dict[str, Any]:
    docs = yaml.safe_load_all((ROOT / "deploy" / "controller.yaml").read_text())
    return next(d for d in docs if d and d["kind"] == "Deployment")


def defaults() -> dict[str, Any]:
    return {opt: param.default for param in controller.params
            if isinstance(param, click.Option) for opt in param.opts}


def test_the_deployment_passes_only_the_defaults_of_a_bare_controller() -> None:
    manifest = deployment()
    (container,) = manifest["spec"]["template"]["spec"]["containers"]
    assert container["args"][0] == "controller"
    known = defaults()
    seen = set()
    for arg in container["args"][1:]:
        flag, _, value = arg.partition("=")
        assert flag in known, f"deploy/controller.yaml passes {flag}, which edl controller lacks"
        seen.add(flag)
        if flag in ON_PURPOSE:
            continue
        if value == "$(POD_NAMESPACE)":
            value = manifest["metadata"]["namespace"]
        if value == "$(POD_NAME)":
            value = ""  # the default identity is $POD_NAME
        default = known[flag]
        assert str(default) == value, f"{flag}: the Deployment passes {value!r}, " \
                                      f"a bare edl controller uses {default!r}"
    # the settings that matter most are spelled out in the Deployment, for admins to read
    assert {"--trainer-priority-class", "--max-load", "--lease-namespace"} <= seen


def test_the_default_trainer_class_is_the_one_shipped() -> None:
    shipped = yaml.safe_load((ROOT / "deploy" / "priorityclass.yaml").read_text())
    assert defaults()["--trainer-priority-class"] == shipped["metadata"]["name"]
