"""The shipped job files run where they say they run.

Every TrainingJob in examples/ and deploy/ has its own name (applying one never
reconfigures another), every edl.dev/v1 job names the one runtime image
deploy/Dockerfile.runtime builds, an in-cluster job's workspace and script exist in that
image, and a local job (relative workspace) says so and has its script beside it.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from edl.jobparser.validation import DEFAULT_IMAGE, RUNTIME_IMAGE_REPOSITORY

ROOT = Path(__file__).resolve().parents[2]


def job_files() -> dict[Path, dict[str, Any]]:
    """Every example TrainingJob that parses as YAML, by file."""
    found = {}
    for path in [*sorted((ROOT / "examples").rglob("*.yaml")),
                 ROOT / "deploy" / "example-trainingjob.yaml"]:
        try:
            docs = list(yaml.safe_load_all(path.read_text()))
        except yaml.YAMLError:
            continue  # examples/jobs/invalid/not-yaml.yaml, on purpose
        for doc in docs:
            if isinstance(doc, dict) and doc.get("kind") == "TrainingJob":
                found[path] = doc
    return found


def image_copies() -> dict[PurePosixPath, Path]:
    """`COPY <repo dir> <image dir>` lines of the runtime image: image path -> repo path."""
    copies = {}
    for line in (ROOT / "deploy" / "Dockerfile.runtime").read_text().splitlines():
        words = [w for w in line.split() if not w.startswith("--")]
        if words[:1] == ["COPY"] and len(words) == 3:
            copies[PurePosixPath(words[2])] = ROOT / words[1]
    return copies


def in_image(path: str) -> Path | None:
    """Where an absolute path of the runtime image comes from in the repository."""
    for image_dir, repo_dir in image_copies().items():
        target = PurePosixPath(path)
        if target == image_dir or image_dir in target.parents:
            return repo_dir / target.relative_to(image_dir)
    return None


def script_of(entrypoint: str) -> str:
    """The script a `python X.py ...` entrypoint runs."""
    words = shlex.split(entrypoint)
    assert words[0] in {"python", "python3"}, entrypoint
    return words[1]


def test_every_example_job_has_its_own_name() -> None:
    jobs = job_files()
    assert len(jobs) >= 7
    names: dict[tuple[str, str], Path] = {}
    for path, job in jobs.items():
        meta = job.get("metadata") or {}
        key = (meta.get("namespace") or "default", meta.get("name"))
        assert key not in names, f"{path} and {names[key]} are both TrainingJob {key}"
        names[key] = path


def test_one_runtime_image_everywhere() -> None:
    for path, job in job_files().items():
        image = job.get("spec", {}).get("image")
        if job["apiVersion"] == "paddlepaddle.org/v1":
            continue  # the original project's own file, with its own image
        assert image in (None, DEFAULT_IMAGE), f"{path}: image {image}"
    mentioned = re.compile(r"[\w.\-/]*edl[\-/]runtime:[\w.\-]+")
    texts = [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "deploy").iterdir(),
             *(ROOT / "examples").rglob("*.yaml"), *(ROOT / "examples").rglob("*.md")]
    for text in texts:
        for image in mentioned.findall(text.read_text()):
            if image.startswith("registry.example.com/"):
                continue  # the placeholder for a user's own mirror (air-gapped clusters)
            assert image == DEFAULT_IMAGE, f"{text.relative_to(ROOT)} names {image}"
    assert DEFAULT_IMAGE.startswith(RUNTIME_IMAGE_REPOSITORY + ":")


def test_in_cluster_examples_run_what_the_image_holds() -> None:
    in_cluster = 0
    for path, job in job_files().items():
        trainer = job.get("spec", {}).get("trainer") or {}
        workspace, entrypoint = trainer.get("workspace") or "", trainer.get("entrypoint")
        if not entrypoint or job["apiVersion"] == "paddlepaddle.org/v1" or "invalid" in path.parts:
            continue
        if workspace.startswith("/"):
            in_cluster += 1
            source = in_image(workspace)
            assert source is not None, f"{path}: {workspace} is not in the runtime image"
            assert (source / script_of(entrypoint)).is_file(), (
                f"{path}: {workspace}/{script_of(entrypoint)} is not in the runtime image")
        else:  # a local example: relative to the job file, and it says how to use it on a cluster
            assert (path.parent / workspace / script_of(entrypoint)).is_file(), path
            header = path.read_text().split("apiVersion")[0]
            assert "edl run" in header and "/home/edl/examples/" in header, path
    assert in_cluster >= 2  # deploy/example-trainingjob.yaml, examples/jobs/mnist.yaml
