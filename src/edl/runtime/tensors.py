"""Tensors on the wire as raw bytes + dtype + shape (never pickle).

Decoding checks that the byte count matches dtype x shape, so a malformed
message is a clear `ValueError`, not a crash or a silent reshape.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from edl.runtime.proto import runtime_pb2 as pb

# Decoded arrays are read-only views of the message bytes (no copy); torch warns
# when wrapping them, but we only ever read from them.
warnings.filterwarnings("ignore", message="The given NumPy array is not writable")

ALLOWED_DTYPES = frozenset({"float32", "float64", "float16", "int64", "int32"})


def encode(block_id: str, array: np.ndarray) -> pb.Tensor:
    array = np.ascontiguousarray(array)
    if array.dtype.name not in ALLOWED_DTYPES:
        raise ValueError(f"tensor {block_id}: dtype {array.dtype.name} not supported")
    return pb.Tensor(
        id=block_id,
        dtype=array.dtype.name,
        shape=list(array.shape),
        data=array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes(),
    )


def decode(tensor: pb.Tensor) -> np.ndarray:
    """A writable-free view of the bytes as an array; raises ValueError when malformed."""
    if tensor.dtype not in ALLOWED_DTYPES:
        raise ValueError(f"tensor {tensor.id!r}: unsupported dtype {tensor.dtype!r}")
    if any(d < 0 for d in tensor.shape):
        raise ValueError(f"tensor {tensor.id!r}: negative dimension in shape {list(tensor.shape)}")
    dtype = np.dtype(tensor.dtype).newbyteorder("<")
    expected = math.prod(tensor.shape) * dtype.itemsize
    if len(tensor.data) != expected:
        raise ValueError(
            f"tensor {tensor.id!r}: {len(tensor.data)} bytes, expected {expected} "
            f"for {tensor.dtype}{list(tensor.shape)}"
        )
    return np.frombuffer(tensor.data, dtype=dtype).reshape(tuple(tensor.shape))
