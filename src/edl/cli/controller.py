"""`edl controller`: run the TrainingJob controller and autoscaler on Kubernetes."""

from __future__ import annotations

import asyncio
import logging
import sys

import click

from edl.api.installation import DEFAULT_INSTALLATION, set_installation
from edl.api.k8snames import subdomain_problem
from edl.jobparser import DEFAULT_IMAGE
from edl.jobparser.manifests import ETCD_IMAGE

# deploy/priorityclass.yaml's class: the default here and in deploy/controller.yaml, so the
# laptop path and the Deployment run alike (tests/cli/test_controller_flags.py)
TRAINER_PRIORITY_CLASS = "edl-elastic-trainer"

# Loggers with an INFO line per API request (lightkube's httpx2, kopf's aiohttp) or per
# TrainingJob event handled (kopf.objects: "Handler ... succeeded", every status write
# included); their warnings and errors still show.
REQUEST_LOGGERS = ("httpx2", "httpx", "httpcore", "aiohttp.access", "aiohttp.client",
                   "kopf.objects")


def _listen(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise click.BadParameter(f"expected HOST:PORT with a port in 0..65535, got {value!r}")
    return host, int(port)


@click.command("controller")
@click.option("--server", default=None, metavar="URL",
              help="API server URL (default: in-cluster config, $KUBECONFIG, ~/.kube/config).")
@click.option("--namespace", default=None, help="Watch one namespace (default: all).")
@click.option("--policy", default="default", show_default=True, help="Scaling policy.")
@click.option("--max-load", "--max-load-desired", "max_load_desired",
              type=click.FloatRange(0.0, 1.0, min_open=True), default=0.97, show_default=True,
              help="Fraction of the cluster's CPU that requests may reach; whole devices (GPUs, "
                   "extended resources) are never held back (as in `edl plan` and `edl run`; "
                   "--max-load-desired is the older spelling).")
@click.option("--interval", type=click.FloatRange(0.1), default=5.0, show_default=True,
              help="Seconds between autoscaler ticks.")
@click.option("--status-interval", type=click.FloatRange(0.1), default=5.0, show_default=True,
              help="Seconds between TrainingJob status refreshes.")
@click.option("--listen", default="127.0.0.1:8080", show_default=True, metavar="HOST:PORT",
              help="Where to serve /metrics, /healthz and /readyz.")
@click.option("--lease-namespace", default="edl-system", show_default=True,
              help="Namespace of the leader-election Lease (deploy/rbac.yaml grants it in "
                   "edl-system; the Deployment passes its own namespace).")
@click.option("--lease-name", default="edl-controller", show_default=True,
              help="Name of the leader-election Lease.")
@click.option("--identity", default="", help="Leader-election identity (default: pod name).")
@click.option("--lease-duration", type=click.FloatRange(1.0), default=15.0, show_default=True,
              help="Seconds a leader's Lease is valid without renewal (client-go's meaning).")
@click.option("--renew-deadline", type=click.FloatRange(0.5), default=10.0, show_default=True,
              help="Seconds the leader keeps trying to renew before it steps down.")
@click.option("--retry-period", type=click.FloatRange(0.1), default=2.0, show_default=True,
              help="Seconds between attempts to acquire or renew the Lease.")
@click.option("--crash-backoff", type=click.FloatRange(0.0), default=10.0, show_default=True,
              help="Seconds between a crashed trainer and its replacement; doubles per crash "
                   "in a row (managed trainer Jobs; the Job controller's 10 s).")
@click.option("--crash-backoff-max", type=click.FloatRange(0.0), default=600.0,
              show_default=True, help="Cap of that delay, in seconds.")
@click.option("--delete-victims", is_flag=True,
              help="On a shrink, name the trainer pods the policy chose: edl's trainer "
                   "controller deletes them (a trainer Job the built-in Job controller "
                   "runs: deleted here); default: the trainer controller chooses.")
@click.option("--image", default=DEFAULT_IMAGE, show_default=True, metavar="IMAGE",
              help="The runtime image of jobs that name none (spec.image).")
@click.option("--etcd-image", default=ETCD_IMAGE, show_default=True, metavar="IMAGE",
              help="The master pod's etcd sidecar image for jobs that name none "
                   "(spec.master.etcd-image); mirror it for an air-gapped registry.")
@click.option("--trainer-priority-class", default=TRAINER_PRIORITY_CLASS, show_default=True,
              metavar="NAME",
              help="PriorityClass of trainer pods whose job names none "
                   "(spec.trainer.priorityClassName): the one deploy/priorityclass.yaml "
                   "ships, which must exist; an empty value gives them none.")
@click.option("--installation", envvar="EDL_INSTALLATION", default=DEFAULT_INSTALLATION,
              show_default=True, metavar="NAME",
              help="This installation's name: it runs the TrainingJobs whose label "
                   "edl.dev/installation names it (the default one: those without the label) "
                   "and leaves the others alone; trainer Jobs get spec.managedBy "
                   "edl.dev/NAME (env EDL_INSTALLATION).")
@click.option("--kueue", is_flag=True,
              help="The cluster runs Kueue: follow trainer Jobs and servers' Workloads (Kueue's "
                   "suspend, unsuspend, admission and eviction act at once) and say why a queued "
                   "job waits in Kueue's words. Needs "
                   "deploy/kueue-rbac.yaml (list/watch Jobs and Workloads).")
@click.option("-v", "--verbose", is_flag=True,
              help="Log at debug level, every API request included.")
@click.option("--log-requests", is_flag=True,
              help="Log one line per API request (method, URL, status) at the usual level: "
                   "what an audit of the controller's calls reads (-v includes it).")
def controller(server: str | None, namespace: str | None, policy: str, max_load_desired: float,
               interval: float, status_interval: float, listen: str, lease_namespace: str,
               lease_name: str, identity: str, lease_duration: float, renew_deadline: float,
               retry_period: float, crash_backoff: float, crash_backoff_max: float,
               delete_victims: bool, image: str, etcd_image: str,
               trainer_priority_class: str, installation: str, kueue: bool,
               verbose: bool, log_requests: bool) -> None:
    """Watch TrainingJobs, create their children, and scale trainers to fit the cluster."""
    from edl.kube.leader import LeaseLost
    from edl.kube.runner import ControllerOptions, ControllerProcess
    from edl.policy import get_policy

    host, port = _listen(listen)
    if not retry_period < renew_deadline < lease_duration:
        raise click.UsageError("need --retry-period < --renew-deadline < --lease-duration")
    if crash_backoff > crash_backoff_max:
        raise click.UsageError("need --crash-backoff <= --crash-backoff-max")
    try:
        get_policy(policy)
    except ValueError as error:
        raise click.UsageError(str(error)) from None
    for flag, value in (("--image", image), ("--etcd-image", etcd_image)):
        if not value.strip():
            raise click.UsageError(f"{flag} must not be empty")
    if trainer_priority_class and (why := subdomain_problem(trainer_priority_class)):
        raise click.UsageError(f"--trainer-priority-class {why}")
    try:
        set_installation(installation)
    except ValueError as error:
        raise click.UsageError(f"--installation: {error}") from None
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not (verbose or log_requests):  # an INFO line per API request drowns everything else
        for name in REQUEST_LOGGERS:
            logging.getLogger(name).setLevel(logging.WARNING)
    options = ControllerOptions(
        server=server, namespace=namespace, policy=policy, max_load_desired=max_load_desired,
        interval=interval, status_interval=status_interval, host=host, port=port,
        lease_namespace=lease_namespace, lease_name=lease_name, identity=identity,
        lease_duration=lease_duration, renew_deadline=renew_deadline, retry_period=retry_period,
        delete_victims=delete_victims, crash_backoff=crash_backoff,
        crash_backoff_max=crash_backoff_max, image=image, etcd_image=etcd_image,
        trainer_priority_class=trainer_priority_class, kueue=kueue,
    )
    async def main() -> None:
        process = ControllerProcess(options)
        process.stop_on_signals()
        await process.run()

    try:
        asyncio.run(main())
    except LeaseLost as error:
        click.echo(f"edl controller: {error}; exiting so a fresh replica can stand by", err=True)
        sys.exit(1)
    except Exception as error:  # one readable line; the log above has the details
        detail = " ".join(str(error).split())  # some library messages span lines
        click.echo(f"edl controller: {type(error).__name__}: {detail}", err=True)
        sys.exit(1)
