"""Checkpoint files for a shard: atomic, checksummed, no pickle.

Layout: b"EDLCKPT1", a 4-byte little-endian header length, a JSON header
(optimizer config, version, a batch-adapting job's aggregation state, and for each
array its key, dtype, shape, offset and length), then the raw array bytes: ``p/``
parameters, ``s/`` optimizer state, ``a/`` the pending update's sums. The CRC32 of
the whole file goes into the etcd metadata, so a torn or foreign file is detected on
restore.

Order of a save: write a temp file, fsync, rename,
fsync the directory; only then may the caller publish the metadata and
delete the index's other files (`remove_other_checkpoints`).
"""

from __future__ import annotations

import contextlib
import json
import os
import struct
import uuid
import zlib
from pathlib import Path

import numpy as np

from edl.runtime.pserver.shard import ShardSnapshot

MAGIC = b"EDLCKPT1"


class CheckpointError(RuntimeError):
    """A checkpoint that is missing, torn or does not match its checksum."""


def _arrays(snap: ShardSnapshot) -> list[tuple[str, np.ndarray]]:
    out = [(f"p/{k}", v) for k, v in sorted(snap.params.items())]
    for block, state in sorted(snap.state.items()):
        out.extend((f"s/{block}/{name}", arr) for name, arr in sorted(state.items()))
    out.extend((f"a/{k}", v) for k, v in sorted(snap.pending.items()))
    return out


def encode_checkpoint(snap: ShardSnapshot) -> bytes:
    entries, chunks, offset = [], [], 0
    for key, arr in _arrays(snap):
        data = np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()
        entries.append(
            {
                "key": key,
                "dtype": arr.dtype.name,
                "shape": list(arr.shape),
                "offset": offset,
                "nbytes": len(data),
            }
        )
        chunks.append(data)
        offset += len(data)
    fields = {"optimizer": snap.optimizer, "version": snap.version, "arrays": entries}
    if snap.aggregation is not None:
        fields["aggregation"] = snap.aggregation
    header = json.dumps(fields).encode()
    return b"".join([MAGIC, struct.pack("<I", len(header)), header, *chunks])


def decode_checkpoint(blob: bytes) -> ShardSnapshot:
    if not blob.startswith(MAGIC) or len(blob) < len(MAGIC) + 4:
        raise CheckpointError("not an edl checkpoint (bad magic)")
    (hlen,) = struct.unpack_from("<I", blob, len(MAGIC))
    start = len(MAGIC) + 4
    try:
        header = json.loads(blob[start : start + hlen])
    except ValueError as error:
        raise CheckpointError(f"checkpoint header unreadable: {error}") from None
    body = memoryview(blob)[start + hlen :]
    snap = ShardSnapshot(optimizer=header["optimizer"], version=int(header["version"]), params={},
                         aggregation=header.get("aggregation"))
    for e in header["arrays"]:
        raw = body[e["offset"] : e["offset"] + e["nbytes"]]
        if len(raw) != e["nbytes"]:
            raise CheckpointError(f"checkpoint truncated at {e['key']}")
        arr = np.frombuffer(raw, dtype=np.dtype(e["dtype"]).newbyteorder("<")).reshape(e["shape"])
        kind, rest = e["key"].split("/", 1)
        if kind == "p":
            snap.params[rest] = arr.copy()
        elif kind == "a":
            snap.pending[rest] = arr.copy()
        else:
            block, name = rest.rsplit("/", 1)
            snap.state.setdefault(block, {})[name] = arr.copy()
    return snap


def write_checkpoint(directory: Path, index: int, snap: ShardSnapshot) -> tuple[Path, int]:
    """Atomically write a new checkpoint file; returns (path, crc32)."""
    directory.mkdir(parents=True, exist_ok=True)
    blob = encode_checkpoint(snap)
    crc = zlib.crc32(blob)
    final = directory / f"pserver-{index}-{uuid.uuid4().hex}.ckpt"
    tmp = final.with_suffix(".tmp")
    with tmp.open("wb") as handle:
        handle.write(blob)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, final)
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return final, crc


def read_checkpoint(path: Path, crc: int) -> ShardSnapshot:
    try:
        blob = Path(path).read_bytes()
    except OSError as error:
        raise CheckpointError(f"checkpoint {path} unreadable: {error}") from None
    actual = zlib.crc32(blob)
    if actual != crc:
        raise CheckpointError(f"checkpoint {path}: crc {actual} != recorded {crc}")
    return decode_checkpoint(blob)


def remove_other_checkpoints(directory: Path, index: int, keep: Path) -> list[Path]:
    """Delete this index's checkpoint files other than `keep`; returns those deleted.

    Called once `keep` is the index's checkpoint of record: a pserver killed between
    writing that record and deleting its previous file, or in the middle of a write,
    leaves files nothing else would ever remove."""
    removed = []
    for path in directory.glob(f"pserver-{index}-*"):
        if path.suffix in (".ckpt", ".tmp") and path != keep:
            with contextlib.suppress(OSError):
                path.unlink()
                removed.append(path)
    return removed
