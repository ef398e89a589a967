"""Shared plumbing of `edl master|pserver|trainer`: env config + overrides, logging,
one-line errors."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any, NoReturn

import click

from edl.runtime.config import ConfigError, RuntimeConfig, from_env

# sysexits.h EX_CONFIG: the pod's configuration is wrong and a restart cannot fix it, so
# `edl run` fails the run at once on it (and the trainer Job's podFailurePolicy fails the
# Job: edl.jobparser.manifests.TRAINER_CONFIG_EXIT) instead of replacing the pod for ever
EXIT_CONFIG = 78


def fail(message: str, code: int = 1) -> NoReturn:
    click.echo(message, err=True)
    sys.exit(code)


def load_config(role: str, **overrides: object) -> RuntimeConfig:
    try:
        config = from_env().with_overrides(**overrides)
    except ConfigError as error:
        fail(f"edl {role}: {error}", EXIT_CONFIG)
    if not config.etcd_endpoints:
        fail(f"edl {role}: EDL_ETCD_ENDPOINTS: required (or --etcd)", EXIT_CONFIG)
    logging.basicConfig(
        level=logging.INFO,
        format=f"%(asctime)s {role} %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    return config


def common_options(f: Callable[..., Any]) -> Callable[..., Any]:
    f = click.option("--etcd", "etcd_endpoints", help="etcd URLs (EDL_ETCD_ENDPOINTS)")(f)
    f = click.option("--job", "job_name", help="job name (EDL_JOB_NAME)")(f)
    f = click.option("--port", type=int, help="gRPC port, 0 = any free (EDL_PORT)")(f)
    f = click.option("--host", "pod_ip", help="address to bind and publish (EDL_POD_IP)")(f)
    return f
