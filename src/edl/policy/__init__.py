"""Scaling policies: elastic jobs + cluster resources -> target parallelism per job."""

from edl.policy.base import (
    POLICIES,
    Decision,
    JobView,
    Policy,
    Trainer,
    UnknownPolicyError,
    get_policy,
)

__all__ = [
    "POLICIES",
    "Decision",
    "JobView",
    "Policy",
    "Trainer",
    "UnknownPolicyError",
    "get_policy",
]
