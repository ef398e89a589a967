"""`edl etcd`: run a real etcd server on loopback in the foreground (local runs, demos)."""

from __future__ import annotations

import signal
import sys
import threading

import click

from edl.coord.embedded import EmbeddedEtcd, EtcdBinaryNotFound, EtcdStartError


@click.command("etcd")
@click.option("--client-port", type=int, default=None, help="Client port (default: a free one).")
@click.option("--peer-port", type=int, default=None, help="Peer port (default: a free one).")
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Keep data here (default: a temporary dir, removed on exit).",
)
def etcd(client_port: int | None, peer_port: int | None, data_dir: str | None) -> None:
    """Run an etcd server on 127.0.0.1 until Ctrl-C; prints its endpoints."""
    # Ctrl-C and SIGTERM only set a flag: no KeyboardInterrupt can cut a shutdown short.
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        server = EmbeddedEtcd(client_port=client_port, peer_port=peer_port, data_dir=data_dir)
    except EtcdBinaryNotFound as error:
        click.echo(f"edl etcd: {error}", err=True)
        sys.exit(1)
    try:
        server.start()
    except EtcdStartError as error:
        server.stop()  # removes the temporary data dir a failed start leaves
        click.echo(f"edl etcd: {error}", err=True)
        sys.exit(1)
    click.echo(f"etcd {server.binary} pid {server.pid} serving")
    click.echo(f"EDL_ETCD_ENDPOINTS={server.endpoints}")
    try:
        while not stop.is_set() and server.running:
            stop.wait(0.5)
    finally:
        crashed = not server.running
        server.stop()
    if crashed and not stop.is_set():
        click.echo("edl etcd: the server exited unexpectedly", err=True)
        sys.exit(1)
    click.echo("etcd stopped")
