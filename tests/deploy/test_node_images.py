"""The images the node tier builds (tools/node/images.py) keep the shipped Dockerfiles'
contract: the same user, entrypoint, command, working directory and HOME, and the examples
at the path deploy/example-trainingjob.yaml's workspace names, owned by that user."""

from __future__ import annotations

import io
import json
import sys
import tarfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools" / "node"))
import images  # noqa: E402  (tools/node/images.py)


def dockerfile(name: str) -> dict[str, Any]:
    """The final stage's USER, ENTRYPOINT, CMD, WORKDIR and `COPY --chown` targets."""
    found: dict[str, Any] = {"COPY": {}}
    lines = (ROOT / "deploy" / name).read_text().splitlines()
    start = max(i for i, line in enumerate(lines) if line.startswith("FROM "))
    for line in lines[start:]:
        word, _, rest = line.partition(" ")
        if word in ("ENTRYPOINT", "CMD"):
            found[word] = json.loads(rest)
        elif word in ("USER", "WORKDIR"):
            found[word] = rest.strip()
        elif word == "COPY" and "--chown=" in rest:
            chown, source, target = rest.split()
            found["COPY"][target] = (source, chown.removeprefix("--chown="))
    return found


def image(tar_path: Path) -> tuple[dict[str, Any], dict[str, tarfile.TarInfo]]:
    """(the image config, the first layer's members by path) of an OCI layout tar."""
    with tarfile.open(tar_path) as outer:
        def blob(digest: str) -> bytes:
            member = outer.extractfile(f"blobs/sha256/{digest.removeprefix('sha256:')}")
            assert member is not None
            return member.read()
        index = json.loads(outer.extractfile("index.json").read())  # type: ignore[union-attr]
        manifest = json.loads(blob(index["manifests"][0]["digest"]))
        config = json.loads(blob(manifest["config"]["digest"]))["config"]
        with tarfile.open(fileobj=io.BytesIO(blob(manifest["layers"][0]["digest"]))) as layer:
            members = {m.name: m for m in layer.getmembers()}
    return config, members


def test_the_runtime_image_keeps_dockerfile_runtimes_user_entrypoint_and_paths(
        tmp_path: Path) -> None:
    shipped = dockerfile("Dockerfile.runtime")
    config, members = image(images.runtime_image(tmp_path))
    assert config["User"] == shipped["USER"] == "10001:10001"
    assert config["Entrypoint"] == shipped["ENTRYPOINT"] == ["edl"]
    assert config["WorkingDir"] == shipped["WORKDIR"] == images.HOME
    assert f"HOME={images.HOME}" in config["Env"]
    home = members[images.HOME.lstrip("/")]
    assert (home.uid, home.gid) == (10001, 10001)
    (target, (source, owner)), = shipped["COPY"].items()
    assert (target, source, owner) == (f"{images.HOME}/examples", "examples", "10001:10001")
    script = members[f"{target.lstrip('/')}/digits/train.py"]
    assert (script.uid, script.gid) == (10001, 10001)
    passwd = members["etc/passwd"]
    assert passwd.mode == 0o644


def test_the_controller_image_keeps_dockerfile_controllers_user_and_command(
        tmp_path: Path) -> None:
    shipped = dockerfile("Dockerfile.controller")
    config, members = image(images.controller_image(tmp_path))
    assert config["User"] == shipped["USER"]
    assert config["Entrypoint"] == shipped["ENTRYPOINT"]
    assert config["Cmd"] == shipped["CMD"] == images.CONTROLLER_CMD
    # deploy/controller.yaml's runAsNonRoot: the kubelet needs a numeric user it can check
    assert config["User"] == "10001:10001" and members["etc/passwd"].mode == 0o644
