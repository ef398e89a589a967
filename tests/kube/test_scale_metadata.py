"""A trainer Job's scale patch carries the Autoscaler's chosen batch (issue 32): the
annotation is the record the Autoscaler reads back as the job's batch; a patch that
dropped it left every tick re-deciding the same batch on Kubernetes."""

from __future__ import annotations

from edl.api.names import (
    ANNOTATION_BATCH_SIZE,
    ANNOTATION_TRAINER_PLACEMENT,
    ANNOTATION_TRAINER_VICTIMS,
)
from edl.kube.managed import scale_metadata


def test_the_scale_patch_keeps_the_batch_the_placement_and_the_victims_only() -> None:
    metadata = {"resourceVersion": "7", "name": "j-trainer", "labels": {"a": "b"},
                "annotations": {ANNOTATION_BATCH_SIZE: "253", ANNOTATION_TRAINER_PLACEMENT: "x",
                                ANNOTATION_TRAINER_VICTIMS: "p1", "user/note": "kept out"}}
    assert scale_metadata(metadata) == {
        "resourceVersion": "7",
        "annotations": {ANNOTATION_BATCH_SIZE: "253", ANNOTATION_TRAINER_PLACEMENT: "x",
                        ANNOTATION_TRAINER_VICTIMS: "p1"}}
    assert scale_metadata({"annotations": {ANNOTATION_BATCH_SIZE: "64"}}) == {
        "annotations": {ANNOTATION_BATCH_SIZE: "64"}}
