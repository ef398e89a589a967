"""Container images without a registry or a container builder: an OCI image layout in a tar
(`ctr images import` reads it), made from files on this machine.

A layer is a list of `Entry`s (a file copied in, a directory, a symlink); the image config
holds the user, entrypoint, environment and working directory as a Dockerfile would. Layers
are uncompressed tars with fixed modification times, so the same inputs give the same digests.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MTIME = 0


@dataclass(frozen=True)
class Entry:
    """One path in a layer: `source` copied (a file, or a tree when `tree`), a file holding
    `data`, a symlink (`link` set), or else a directory. `uid`/`gid`/`mode` override the
    source's."""

    path: str
    source: Path | None = None
    data: bytes | None = None
    link: str | None = None
    tree: bool = False
    uid: int = 0
    gid: int = 0
    mode: int | None = None


@dataclass
class Image:
    """What goes into the image config (the OCI `config` object) plus its layers."""

    name: str
    layers: list[list[Entry]]
    entrypoint: list[str] = field(default_factory=list)
    cmd: list[str] = field(default_factory=list)
    user: str = ""
    env: list[str] = field(default_factory=lambda: ["PATH=/usr/local/bin:/usr/bin:/bin"])
    workdir: str = "/"
    labels: dict[str, str] = field(default_factory=dict)


def _info(name: str, entry: Entry, kind: bytes, mode: int, size: int = 0) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name.lstrip("/"))
    info.type, info.mode, info.size, info.mtime = kind, mode, size, MTIME
    info.uid, info.gid = entry.uid, entry.gid
    return info


def _add(tar: tarfile.TarFile, entry: Entry, seen: set[str]) -> None:
    def parents(path: str) -> None:
        parts = path.strip("/").split("/")[:-1]
        for i in range(1, len(parts) + 1):
            parent = "/".join(parts[:i])
            if parent not in seen:
                seen.add(parent)
                tar.addfile(_info(parent, Entry(parent), tarfile.DIRTYPE, 0o755))

    parents(entry.path)
    name = entry.path.strip("/")
    if name in seen:
        return
    seen.add(name)
    if entry.link is not None:
        info = _info(name, entry, tarfile.SYMTYPE, 0o777)
        info.linkname = entry.link
        tar.addfile(info)
    elif entry.data is not None:
        tar.addfile(_info(name, entry, tarfile.REGTYPE, entry.mode or 0o644, len(entry.data)),
                    io.BytesIO(entry.data))
    elif entry.source is None:
        tar.addfile(_info(name, entry, tarfile.DIRTYPE, entry.mode or 0o755))
    elif entry.tree:
        tar.addfile(_info(name, entry, tarfile.DIRTYPE, entry.mode or 0o755))
        for root, dirs, files in os.walk(entry.source):
            dirs.sort()
            rel = Path(root).relative_to(entry.source)
            for d in dirs:
                src = Path(root) / d
                sub = f"{name}/{rel / d}" if str(rel) != "." else f"{name}/{d}"
                _add(tar, Entry(sub, src if not src.is_symlink() else None,
                                link=os.readlink(src) if src.is_symlink() else None,
                                tree=not src.is_symlink(), uid=entry.uid, gid=entry.gid), seen)
            for f in sorted(files):
                src = Path(root) / f
                sub = f"{name}/{rel / f}" if str(rel) != "." else f"{name}/{f}"
                if src.is_symlink():
                    _add(tar, Entry(sub, link=os.readlink(src), uid=entry.uid, gid=entry.gid),
                         seen)
                else:
                    _add(tar, Entry(sub, src, uid=entry.uid, gid=entry.gid), seen)
    else:
        stat = entry.source.stat()
        info = _info(name, entry, tarfile.REGTYPE,
                     entry.mode if entry.mode is not None else stat.st_mode & 0o7777,
                     stat.st_size)
        with entry.source.open("rb") as data:
            tar.addfile(info, data)


def _blob(out: tarfile.TarFile, data: bytes) -> dict[str, Any]:
    digest = hashlib.sha256(data).hexdigest()
    info = tarfile.TarInfo(f"blobs/sha256/{digest}")
    info.size, info.mtime = len(data), MTIME
    out.addfile(info, io.BytesIO(data))
    return {"digest": f"sha256:{digest}", "size": len(data)}


def _file_blob(out: tarfile.TarFile, path: Path) -> dict[str, Any]:
    sha = hashlib.sha256()
    with path.open("rb") as data:
        for chunk in iter(lambda: data.read(1 << 20), b""):
            sha.update(chunk)
    info = tarfile.TarInfo(f"blobs/sha256/{sha.hexdigest()}")
    info.size, info.mtime = path.stat().st_size, MTIME
    with path.open("rb") as data:
        out.addfile(info, data)
    return {"digest": f"sha256:{sha.hexdigest()}", "size": info.size}


def write_image(image: Image, target: Path) -> Path:
    """Write `image` as an OCI layout tar at `target`, named `image.name` for containerd."""
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch, \
            tarfile.open(target, "w", format=tarfile.PAX_FORMAT) as out:
        layers, diff_ids = [], []
        for i, entries in enumerate(image.layers):
            layer = Path(scratch) / f"layer{i}.tar"
            with tarfile.open(layer, "w", format=tarfile.PAX_FORMAT) as tar:
                seen: set[str] = set()
                for entry in entries:
                    _add(tar, entry, seen)
            desc = _file_blob(out, layer)
            layers.append({"mediaType": "application/vnd.oci.image.layer.v1.tar", **desc})
            diff_ids.append(desc["digest"])
            layer.unlink()
        config = {
            "architecture": "amd64", "os": "linux",
            "config": {"User": image.user, "Entrypoint": image.entrypoint or None,
                       "Cmd": image.cmd or None, "Env": image.env,
                       "WorkingDir": image.workdir, "Labels": image.labels or None},
            "rootfs": {"type": "layers", "diff_ids": diff_ids},
        }
        config_desc = _blob(out, json.dumps(config, sort_keys=True).encode())
        manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                               **config_desc},
                    "layers": layers}
        manifest_desc = _blob(out, json.dumps(manifest, sort_keys=True).encode())
        tag = image.name.rsplit(":", 1)[1]
        index = {"schemaVersion": 2, "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json", **manifest_desc,
            "annotations": {"io.containerd.image.name": image.name,
                            "org.opencontainers.image.ref.name": tag}}]}
        for name, data in (("oci-layout", {"imageLayoutVersion": "1.0.0"}), ("index.json", index)):
            raw = json.dumps(data).encode()
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(raw), MTIME
            out.addfile(info, io.BytesIO(raw))
    return target


def files(pairs: Iterable[tuple[str, Path]]) -> list[Entry]:
    """Entries copying each (path in the image, file here)."""
    return [Entry(path, source) for path, source in pairs]
