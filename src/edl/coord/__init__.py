"""Coordination through a real etcd: pserver registration, discovery, master election.

Modules: ``embedded`` (a real etcd server process), ``endpoints`` (parsing),
``client`` (``EtcdClient``: leases, registration, keys), ``discovery`` (pserver list
and watch), ``election`` (leader lock and fenced writes).
"""
