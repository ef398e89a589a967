"""Kubernetes integration: the CRD, the kopf operator, metrics and leader election.

The Cluster adapter that the Controller and Autoscaler drive lives in
`edl.cluster.kube`; this package holds what only a Kubernetes deployment needs.
"""
