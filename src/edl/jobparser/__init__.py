"""The job parser: validate a TrainingJob (defaults, every problem at once) and turn it
into the master/pserver ReplicaSets, the trainer Job and the master Service (pure)."""

from edl.api.errors import JobValidationError
from edl.jobparser.manifests import LABEL_JOB, LABEL_ROLE, child_names, etcd_endpoints
from edl.jobparser.parser import DefaultJobParser, JobParser
from edl.jobparser.validation import (
    DEFAULT_IMAGE,
    DEFAULT_PASSES,
    DEFAULT_PORT,
    DEFAULT_PORTS_NUM,
    DEFAULT_PORTS_NUM_FOR_SPARSE,
    PodDefaults,
)

__all__ = [
    "DEFAULT_IMAGE",
    "DEFAULT_PASSES",
    "DEFAULT_PORT",
    "DEFAULT_PORTS_NUM",
    "DEFAULT_PORTS_NUM_FOR_SPARSE",
    "LABEL_JOB",
    "LABEL_ROLE",
    "DefaultJobParser",
    "JobParser",
    "JobValidationError",
    "PodDefaults",
    "child_names",
    "etcd_endpoints",
]
