"""The test node's cluster DNS: `<service>.<namespace>.svc.cluster.local` A records, as
CoreDNS answers them: the Service's ClusterIP (kube-proxy carries it to a pod), or its ready
endpoint addresses (EndpointSlices) for a headless Service, or for every Service with
`--endpoints` (no kube-proxy: each Service edl creates maps a port to the same target port,
so the pod IP serves). It stands in for CoreDNS (docs/testing.md, "The node tier", says
why). Other names get NXDOMAIN; a known name asked for another type, an empty answer.

Run as `python dns.py --netns /proc/<pid>/ns/net --listen IP --api URL --ca F --cert F
--key F` (stdlib only): the UDP socket is made inside the node's network namespace, the API
is asked on the machine's loopback. Exits on SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import socket
import ssl
import struct
import time
import urllib.request

from forward import in_netns  # the sibling script (dns.py runs as a script)

SUFFIX = ("svc", "cluster", "local")
TTL = 2


class Resolver:
    """Service name -> ready endpoint IPs, from the API server, cached for a second."""

    def __init__(self, api: str, context: ssl.SSLContext, endpoints: bool) -> None:
        self.api, self.context, self.endpoints = api, context, endpoints
        self.cache: dict[tuple[str, str], tuple[float, list[str] | None]] = {}

    def lookup(self, service: str, namespace: str) -> list[str] | None:
        """The addresses, [] if the Service has none ready, None if there is no Service."""
        key = (service, namespace)
        cached = self.cache.get(key)
        if cached and time.monotonic() - cached[0] < 1.0:
            return cached[1]
        answer = self._ask(service, namespace)
        self.cache[key] = (time.monotonic(), answer)
        return answer

    def _get(self, path: str) -> dict | None:
        try:
            with urllib.request.urlopen(self.api + path, context=self.context,
                                        timeout=5) as reply:
                return json.loads(reply.read())
        except urllib.error.HTTPError as error:
            if error.code == 404:
                return None
            raise

    def _ask(self, service: str, namespace: str) -> list[str] | None:
        found = self._get(f"/api/v1/namespaces/{namespace}/services/{service}")
        if found is None:
            return None
        cluster_ip = found["spec"].get("clusterIP")
        if not self.endpoints and cluster_ip and cluster_ip != "None":
            return [cluster_ip]
        slices = self._get(f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices"
                           f"?labelSelector=kubernetes.io/service-name%3D{service}") or {}
        return sorted({address for item in slices.get("items", [])
                       for endpoint in item.get("endpoints") or []
                       if (endpoint.get("conditions") or {}).get("ready", True)
                       for address in endpoint.get("addresses", [])
                       if item.get("addressType") == "IPv4"})


def parse_question(packet: bytes) -> tuple[list[str], int, int]:
    """(labels, qtype, offset after the question)."""
    labels, offset = [], 12
    while packet[offset]:
        length = packet[offset]
        labels.append(packet[offset + 1:offset + 1 + length].decode("ascii", "replace").lower())
        offset += 1 + length
    qtype, _ = struct.unpack("!HH", packet[offset + 1:offset + 5])
    return labels, qtype, offset + 5


def answer(packet: bytes, resolver: Resolver) -> bytes:
    (ident, flags, qdcount) = struct.unpack("!HHH", packet[:6])
    if qdcount != 1:
        return struct.pack("!HHHHHH", ident, 0x8184, 0, 0, 0, 0)  # not implemented
    labels, qtype, end = parse_question(packet)
    question = packet[12:end]
    rd = flags & 0x0100
    addresses: list[str] | None = None
    if len(labels) == 5 and tuple(labels[2:]) == SUFFIX:
        try:
            addresses = resolver.lookup(labels[0], labels[1])
        except OSError:
            return struct.pack("!HHHHHH", ident, 0x8082 | rd, 1, 0, 0, 0) + question  # SERVFAIL
    if addresses is None:
        return struct.pack("!HHHHHH", ident, 0x8483 | rd, 1, 0, 0, 0) + question  # NXDOMAIN
    records = [struct.pack("!HHHIH", 0xC00C, 1, 1, TTL, 4) + socket.inet_aton(a)
               for a in addresses] if qtype == 1 else []
    return (struct.pack("!HHHHHH", ident, 0x8480 | rd, 1, len(records), 0, 0) + question
            + b"".join(records))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    for flag in ("--netns", "--listen", "--api", "--ca", "--cert", "--key"):
        parser.add_argument(flag, required=True)
    parser.add_argument("--endpoints", action="store_true",
                        help="answer every Service's endpoint addresses (no kube-proxy)")
    args = parser.parse_args()
    context = ssl.create_default_context(cafile=args.ca)
    context.load_cert_chain(args.cert, args.key)
    resolver = Resolver(args.api, context, args.endpoints)

    def bind() -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind((args.listen, 53))
        return sock

    sock = in_netns(args.netns, bind)
    print("ready", flush=True)
    while True:
        packet, peer = sock.recvfrom(512)
        try:
            sock.sendto(answer(packet, resolver), peer)
        except (IndexError, struct.error, UnicodeError):
            continue


if __name__ == "__main__":
    main()
