"""Kubernetes: the `KubeCluster` adapter behind the `Cluster` port and everything only a
Kubernetes deployment needs (CRD, kopf operator, Lease election, metrics, the
`edl controller` process).

Layers, each importing only from those above it in this list:

1. leaves: `client`, `retry`, `crd`, `status`, `events`, `failures`;
2. the watch cache: `reflector`, `state`; `admission` (what a cluster refuses, from `crd`);
3. `cluster.KubeCluster`;
4. on top: `operator`, `autoscaling`, `leader`, `metrics`, `runner`.
"""
