"""Partition, optimizers, wire tensors and checkpoint files."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from edl.runtime import tensors
from edl.runtime.proto import runtime_pb2 as pb
from edl.runtime.pserver.checkpoint import (
    CheckpointError,
    read_checkpoint,
    remove_other_checkpoints,
    write_checkpoint,
)
from edl.runtime.pserver.optim import OptimizerConfig, make_optimizer
from edl.runtime.pserver.partition import partition, split_blocks
from edl.runtime.pserver.shard import Shard

sizes = st.lists(st.integers(1, 5000), min_size=1, max_size=20)


@given(sizes, st.integers(1, 5), st.integers(64, 2048))
def test_partition_covers_everything_once_and_balances(numels, n, block) -> None:
    params = [(f"p{i}", k) for i, k in enumerate(numels)]
    shards = partition(params, n, block)
    assert shards == partition(params, n, block)  # deterministic
    seen: dict[str, list[tuple[int, int]]] = {}
    for shard in shards:
        for b in shard:
            assert b.size <= block
            seen.setdefault(b.param, []).append((b.start, b.stop))
    for name, numel in params:
        spans = sorted(seen[name])
        assert spans[0][0] == 0 and spans[-1][1] == numel
        assert all(a[1] == b[0] for a, b in itertools.pairwise(spans))
    loads = [sum(b.size for b in s) for s in shards]
    biggest = max(b.size for b in split_blocks(params, block))
    assert max(loads) - min(loads) <= biggest  # greedy LPT bound


@pytest.mark.parametrize(
    ("name", "ref"),
    [
        ("sgd", lambda p: torch.optim.SGD(p, lr=0.1, weight_decay=0.01)),
        ("momentum", lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=0.01)),
        ("adam", lambda p: torch.optim.Adam(p, lr=0.1, weight_decay=0.01)),
    ],
)
def test_optimizers_match_torch(name, ref) -> None:
    torch.manual_seed(0)
    start = torch.randn(50)
    grads = [torch.randn(50) for _ in range(5)]
    ours = make_optimizer(OptimizerConfig(name=name, lr=0.1, weight_decay=0.01))
    p, state = start.clone(), {}
    for g in grads:
        ours.step(p, g, state)
    q = start.clone().requires_grad_(True)
    opt = ref([q])
    for g in grads:
        q.grad = g.clone()
        opt.step()
    assert torch.allclose(p, q.detach(), atol=1e-6)


def test_unknown_optimizer_names_the_field() -> None:
    with pytest.raises(ValueError, match=r"optimizer\.name"):
        make_optimizer(OptimizerConfig(name="lbfgs"))


def test_tensor_round_trip_and_malformed() -> None:
    arr = np.arange(12, dtype=np.float32).reshape(3, 4)
    msg = tensors.encode("w#0", arr)
    back = tensors.decode(pb.Tensor.FromString(msg.SerializeToString()))
    assert np.array_equal(back, arr)
    with pytest.raises(ValueError, match="bytes, expected"):
        tensors.decode(pb.Tensor(id="x", dtype="float32", shape=[3], data=b"\0" * 5))
    with pytest.raises(ValueError, match="unsupported dtype"):
        tensors.decode(pb.Tensor(id="x", dtype="object", shape=[1], data=b"\0" * 8))


def test_checkpoint_round_trip_and_corruption(tmp_path) -> None:
    shard = Shard()
    assert shard.init({"w#0": np.ones(10)}, OptimizerConfig(name="adam", lr=0.5))
    assert not shard.init({"w#0": np.zeros(10)}, OptimizerConfig())  # first init wins
    shard.apply({"w#0": np.full(10, 2.0)})
    path, crc = write_checkpoint(tmp_path, 0, shard.snapshot())
    assert not list(tmp_path.glob("*.tmp"))
    restored = Shard()
    restored.restore(read_checkpoint(path, crc))
    assert restored.version == 1 and restored.cfg.name == "adam"
    assert np.allclose(restored.read()[1]["w#0"], shard.read()[1]["w#0"])
    # the optimizer state survived: the next update matches
    shard.apply({"w#0": np.ones(10)})
    restored.apply({"w#0": np.ones(10)})
    assert np.allclose(restored.read()[1]["w#0"], shard.read()[1]["w#0"])
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="crc"):
        read_checkpoint(path, crc)


def test_a_saved_checkpoint_sweeps_its_index_leftovers_only(tmp_path) -> None:
    """Files a killed pserver left (a superseded checkpoint, a torn write) go once the
    index has a newer record; other indexes' files stay."""
    shard = Shard()
    shard.init({"w#0": np.ones(4)}, OptimizerConfig())
    stale, _ = write_checkpoint(tmp_path, 1, shard.snapshot())
    torn = tmp_path / "pserver-1-0123.tmp"
    torn.write_bytes(b"half")
    others = [write_checkpoint(tmp_path, i, shard.snapshot())[0] for i in (0, 10, 11)]
    keep, _ = write_checkpoint(tmp_path, 1, shard.snapshot())
    assert sorted(remove_other_checkpoints(tmp_path, 1, keep)) == sorted([stale, torn])
    assert sorted(tmp_path.iterdir()) == sorted([keep, *others])


def test_shard_rejects_unknown_block_and_wrong_size() -> None:
    shard = Shard()
    shard.init({"w#0": np.ones(4)}, OptimizerConfig())
    with pytest.raises(ValueError, match="unknown block"):
        shard.apply({"v#0": np.ones(4)})
    with pytest.raises(ValueError, match="expected 4"):
        shard.apply({"w#0": np.ones(3)})
    assert shard.version == 0


def test_trainer_threads_leave_a_core_for_communication() -> None:
    from edl.runtime.config import ConfigError, compute_threads, from_env

    assert compute_threads(0, 2) == 1
    assert compute_threads(0, 8) == 7
    assert compute_threads(0, 1) == 1
    assert compute_threads(0, None) == 1
    assert compute_threads(3, 2) == 3
    assert from_env({"EDL_TRAINER_THREADS": "2"}).trainer_threads == 2
    with pytest.raises(ConfigError, match="EDL_TRAINER_THREADS"):
        from_env({"EDL_TRAINER_THREADS": "-1"})


def test_layout_load_copies_blocks_and_rejects_a_wrong_size() -> None:
    from edl.runtime.trainer.api import ParameterLayout

    model = torch.nn.Linear(5, 3)
    layout = ParameterLayout(model, num_pservers=1, block_size=4)
    wanted = {name: torch.randn_like(p) for name, p in model.named_parameters()}
    reply = pb.ParamsReply(initialized=True)
    for b in layout.shards[0]:
        block = wanted[b.param].reshape(-1)[b.start : b.stop].numpy()
        reply.params.append(tensors.encode(b.id, block))
    layout.load(0, reply)
    for name, p in model.named_parameters():
        assert torch.equal(p.detach(), wanted[name])
    short = pb.ParamsReply(initialized=True)
    short.CopyFrom(reply)
    short.params[0].CopyFrom(tensors.encode(short.params[0].id, np.zeros(1, np.float32)))
    with pytest.raises(ValueError, match="values"):
        layout.load(0, short)


def test_the_trainer_api_page_names_every_optimizer_and_setting() -> None:
    """docs/trainer-api.md stays true: each optimizer and each of its settings is named."""
    from dataclasses import fields
    from pathlib import Path

    from edl.runtime.pserver.optim import OPTIMIZERS, OptimizerConfig

    page = (Path(__file__).resolve().parents[2] / "docs" / "trainer-api.md").read_text()
    for name in OPTIMIZERS:
        assert f'`"{name}"`' in page, name
    for setting in fields(OptimizerConfig):
        if setting.name != "name":
            assert f"`{setting.name}`" in page, setting.name


def test_gates_forward_every_rpc_the_proto_declares() -> None:
    """A gate listing its methods by hand left `Leave` at the base class (UNIMPLEMENTED)."""
    from edl.runtime.gate import make_gate, rpc_names
    from edl.runtime.proto import runtime_pb2_grpc as pb_grpc

    assert "Leave" in rpc_names("Master")
    for service, base in (("Master", pb_grpc.MasterServicer),
                          ("PServer", pb_grpc.PServerServicer)):  # fmt: skip
        gate = make_gate(service)
        assert isinstance(gate, base) and gate.current is None
        for name in rpc_names(service):
            assert getattr(type(gate), name) is not getattr(base, name), (service, name)
