"""Building the lightkube client: in-cluster, from kubeconfig, or an explicit URL.

An explicit server URL (`edl controller --server http://127.0.0.1:PORT`) is how
the tests point the real client code at kmock's emulator.
"""

from __future__ import annotations

import os

import httpx2
import yaml
from lightkube import AsyncClient, ConfigError, KubeConfig
from lightkube.config.models import Cluster, User

FIELD_MANAGER = "edl-controller"


def kube_config(server: str | None = None, namespace: str = "default") -> KubeConfig:
    """Configuration for `server` if given, else in-cluster / $KUBECONFIG / ~/.kube/config."""
    if server:
        return KubeConfig.from_one(cluster=Cluster(server=server), user=User(), namespace=namespace)
    try:
        return KubeConfig.from_env()
    except ConfigError as error:
        raise KubeConfigError(" ".join(str(error).split())) from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise KubeConfigError(f"kubeconfig {_kubeconfig_source()}: not valid YAML{where}") from None
    except OSError as error:
        reason = error.strerror or str(error)
        raise KubeConfigError(f"kubeconfig {_kubeconfig_source()}: {reason}") from None
    except (AttributeError, KeyError, TypeError, ValueError):
        # lightkube reads the file with few checks: an empty or foreign YAML file surfaces
        # as whatever lookup failed first, which would tell the user nothing.
        raise KubeConfigError(
            f"kubeconfig {_kubeconfig_source()}: not a kubeconfig (needs clusters, users, contexts)"
        ) from None


def _kubeconfig_source() -> str:
    return os.environ.get("KUBECONFIG") or "~/.kube/config"


class KubeConfigError(Exception):
    """No usable cluster configuration (missing, unreadable or malformed kubeconfig)."""


def make_client(server: str | None = None, *, timeout: float = 30.0) -> AsyncClient:
    """An AsyncClient that decodes eagerly and applies as edl's field manager."""
    return AsyncClient(
        kube_config(server),
        timeout=httpx2.Timeout(timeout),
        lazy=False,
        field_manager=FIELD_MANAGER,
    )
