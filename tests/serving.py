"""Whether a master or pserver process serves yet, asked the way its clients ask."""

from __future__ import annotations

import grpc

from edl.runtime.proto import runtime_pb2 as pb
from edl.runtime.proto import runtime_pb2_grpc as pb_grpc


def answers(address: str, service: str) -> bool:
    """Whether the `service` ("Master", "PServer") at `address` answers a read RPC.

    A master or pserver publishes its address when it wins its election or index, and
    serves only after restoring that state; in between it answers UNAVAILABLE, which
    real clients retry. A test calling one directly must wait the same way."""
    with grpc.insecure_channel(address) as channel:
        try:
            if service == "Master":
                pb_grpc.MasterStub(channel).GetProgress(pb.ProgressRequest(), timeout=5)
            else:
                pb_grpc.PServerStub(channel).Pull(pb.PullRequest(), timeout=5)
        except grpc.RpcError as error:
            if error.code() == grpc.StatusCode.UNAVAILABLE:
                return False
            raise
    return True
