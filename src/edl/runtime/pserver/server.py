"""The pserver's gRPC handlers: Init, Push (apply + optionally pull), Pull.

A push of a job that adapts its batch joins the pending update (`Shard.push`) and is
answered at once with the current parameters, which change when an update completes.

Malformed requests (bad tensor bytes, unknown blocks, wrong sizes) are
answered INVALID_ARGUMENT and change nothing; the server keeps serving.
Once `serving` is cleared (lease lost, shutdown) every call is refused at
once with UNAVAILABLE, so a partitioned pserver cannot diverge from the
replacement that took its index.

Handlers are synchronous, on a thread pool (grpc's sync server): for
megabyte messages it costs a third of the CPU of grpc.aio, and the shard is
thread-safe anyway.
"""

from __future__ import annotations

from collections.abc import Callable

import grpc

from edl.runtime import tensors
from edl.runtime.proto import runtime_pb2 as pb
from edl.runtime.proto import runtime_pb2_grpc as pb_grpc
from edl.runtime.pserver.optim import OptimizerConfig
from edl.runtime.pserver.shard import Shard, ShardError

OPTIMIZER_FIELDS = ("name", "lr", "momentum", "beta1", "beta2", "eps", "weight_decay")


def optimizer_from_proto(msg: pb.OptimizerConfig) -> OptimizerConfig:
    defaults = OptimizerConfig()
    values = {f: getattr(msg, f) or getattr(defaults, f) for f in OPTIMIZER_FIELDS}
    return OptimizerConfig(**values)


def optimizer_to_proto(cfg: OptimizerConfig) -> pb.OptimizerConfig:
    return pb.OptimizerConfig(**{f: getattr(cfg, f) for f in OPTIMIZER_FIELDS})


class PServerService(pb_grpc.PServerServicer):
    def __init__(
        self, shard: Shard, index: int, lease_valid: Callable[[], bool] = lambda: True
    ) -> None:
        self.shard = shard
        self.index = index
        self.lease_valid = lease_valid
        self._serving = True

    @property
    def serving(self) -> bool:
        """Checked on every request: never serve once the lease may be gone."""
        return self._serving and self.lease_valid()

    @serving.setter
    def serving(self, value: bool) -> None:
        self._serving = value

    def _check(self, context: grpc.ServicerContext) -> None:
        if not self.serving:
            context.abort(grpc.StatusCode.UNAVAILABLE, f"pserver {self.index} not serving")

    def Init(self, request: pb.InitRequest, context: grpc.ServicerContext) -> pb.Ack:
        self._check(context)
        try:
            params = {t.id: tensors.decode(t) for t in request.params}
            accepted = self.shard.init(params, optimizer_from_proto(request.optimizer))
        except (ValueError, ShardError) as error:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))
        return pb.Ack(accepted=accepted)

    def Push(self, request: pb.PushRequest, context: grpc.ServicerContext) -> pb.ParamsReply:
        self._check(context)
        if not self.shard.initialized:
            return pb.ParamsReply(initialized=False)
        try:
            sqnorm = request.grad_sqnorm if request.HasField("grad_sqnorm") else None
            self.shard.push({t.id: tensors.decode(t) for t in request.grads},
                            int(request.samples), sqnorm)
        except (ValueError, ShardError) as error:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))
        self._check(context)
        if not request.pull:
            return pb.ParamsReply(initialized=True, version=self.shard.version)
        return self._params()

    def Pull(self, request: pb.PullRequest, context: grpc.ServicerContext) -> pb.ParamsReply:
        self._check(context)
        if not self.shard.initialized:
            return pb.ParamsReply(initialized=False)
        return self._params()

    def _params(self) -> pb.ParamsReply:
        version, params = self.shard.read_into(tensors.encode)
        return pb.ParamsReply(initialized=True, version=version, params=params)
