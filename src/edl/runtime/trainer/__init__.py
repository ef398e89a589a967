"""The trainer side: `connect(model, ...)` returns a `Job` whose `batches` and
`step` make an ordinary PyTorch loop elastic and fault tolerant."""

from edl.runtime.trainer.api import Job, connect

__all__ = ["Job", "connect"]
