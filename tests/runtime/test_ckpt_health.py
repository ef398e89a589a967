"""A collective job's rank 0 checkpoint health: the agent's probe of EDL_CHECKPOINT_DIR
(a directory replaced by a file or gone, a filesystem with less room than the last
checkpoint), which pod hosts rank 0, and the records it publishes into a real etcd as
`edl run` reads them (a fault line, its clearing, the last word)."""

from __future__ import annotations

import json
import os
import shutil
import types
from pathlib import Path

from edl.coord.embedded import EmbeddedEtcd
from edl.local.checkpoints import HealthReader, fault_line, final_word, health_prefix
from edl.runtime.collective import gateway, keys
from edl.runtime.collective.ckpt_health import (
    PROBE_PREFIX,
    RankZeroWatch,
    hosts_rank0,
    newest_file,
    probe,
)


def _statvfs(free: int, blocks: int = 10**6):  # type: ignore[no-untyped-def]
    return lambda path: types.SimpleNamespace(f_bavail=free // 4096, f_frsize=4096,
                                              f_blocks=blocks)


def test_a_writable_directory_passes_and_keeps_no_probe_file(tmp_path: Path) -> None:
    (tmp_path / "old.pt").write_bytes(b"x" * 10)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "model.pt").write_bytes(b"x" * 100)
    os.utime(tmp_path / "old.pt", (1, 1))
    found = probe(str(tmp_path), "pod-a")
    assert (found.cause, found.error) == ("", "")
    assert found.newest is not None and (found.newest.name, found.newest.size) == (
        os.path.join("sub", "model.pt"), 100)
    assert found.free is not None and found.free > 0
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(PROBE_PREFIX)]


def test_a_directory_replaced_by_a_file_or_gone_is_named_with_its_errno(
        tmp_path: Path) -> None:
    blocked = tmp_path / "ckpt"
    blocked.write_text("a file where the checkpoint directory was")
    found = probe(str(blocked), "pod-a")
    assert found.cause == "errno 20" and "[Errno 20] Not a directory" in found.error
    assert str(blocked) in found.error
    gone = probe(str(tmp_path / "gone"), "pod-a")
    assert gone.cause == "errno 2" and "No such file or directory" in gone.error


def test_less_room_than_the_last_checkpoint_fails_before_the_save_would(tmp_path: Path) -> None:
    (tmp_path / "model.pt").write_bytes(b"x" * 3 * 2**20)
    full = probe(str(tmp_path), "pod-a", _statvfs(2 * 2**20))
    assert full.cause == "space"
    assert "2.0 MiB free, less than its last checkpoint (model.pt, 3.0 MiB)" in full.error
    assert probe(str(tmp_path), "pod-a", _statvfs(4 * 2**20)).cause == ""
    # a filesystem reporting no sizes at all (some FUSE mounts): only the write decides
    assert probe(str(tmp_path), "pod-a", _statvfs(0, blocks=0)).cause == ""
    shutil.rmtree(tmp_path)
    tmp_path.mkdir()
    assert probe(str(tmp_path), "pod-a", _statvfs(0)).cause == ""  # nothing saved to fit
    assert newest_file(str(tmp_path)) is None


def test_rank_0_is_where_the_newest_rendezvous_placed_it() -> None:
    def rec(rank: int, round_: int, at: float = 0.0) -> str:
        return json.dumps({"rank": rank, "round": round_, "time": at})

    records = {"k/a": rec(0, 1), "k/b": rec(1, 1), "k/c": "not json"}
    assert hosts_rank0(records, "k/a") and not hosts_rank0(records, "k/b")
    records.update({"k/b": rec(0, 2), "k/a": rec(1, 2)})  # a later round moved it
    assert hosts_rank0(records, "k/b") and not hosts_rank0(records, "k/a")
    assert not hosts_rank0({}, "k/a")
    # a live job: the pod whose worker formed the newest generation as rank 0
    assert hosts_rank0({"k/a": rec(0, 3, 10.0), "k/b": rec(0, 5, 5.0)}, "k/b")


async def test_the_pod_hosting_rank_0_publishes_each_change_and_the_last_word(
        tmp_path: Path) -> None:
    directory = tmp_path / "ckpt"
    directory.mkdir()
    (directory / "model.pt").write_bytes(b"x" * 64)
    with EmbeddedEtcd() as etcd:
        env = {"EDL_ETCD_ENDPOINTS": etcd.endpoints, "EDL_POD_NAME": "pod-a"}
        agents = {pod: keys.agent_key("default", "ddp", pod) for pod in ("pod-a", "pod-b")}
        gateway.put(etcd.endpoints, agents["pod-a"], json.dumps({"rank": 0, "round": 1}))
        gateway.put(etcd.endpoints, agents["pod-b"], json.dumps({"rank": 1, "round": 1}))
        watch = RankZeroWatch(env, "default", "ddp", str(directory))
        other = RankZeroWatch({**env, "EDL_POD_NAME": "pod-b"}, "default", "ddp",
                              str(directory))
        reader = HealthReader(etcd.endpoints, "default", "ddp")
        assert keys.checkpoint_health_key("default", "ddp").startswith(
            health_prefix("default", "ddp"))
        assert other.check() is None  # not rank 0: not probed, not published
        first = watch.check()
        assert first is not None and first["ok"] and first["saved_file"] == "model.pt"
        assert watch.check() is None  # unchanged: not published again
        assert (await reader.read())[1] == []
        directory.rename(tmp_path / "away")
        directory.write_text("a file")
        failing = watch.check()
        assert failing is not None and not failing["ok"]
        [line] = (await reader.read())[1]
        assert line.startswith("rank 0 on pod-a cannot checkpoint: ") and "Errno" in line
        assert "the training since its last checkpoint (model.pt, " in line  # seen before
        assert "s old) is lost if the workers restart" in line
        assert watch.check() is None  # the same failure: said once
        assert final_word(reader.records).startswith("last state NOT saved (rank 0 on pod-a: ")
        directory.unlink()
        (tmp_path / "away").rename(directory)
        watch.check()
        assert (await reader.read())[1] == [
            "rank 0 on pod-a can checkpoint again (its directory takes writes)"]
        watch.finish()  # never started: only the final record
        records, _ = await reader.read()
        assert records["rank0"]["final"] is True
        assert final_word(records).startswith(
            "last state saved (rank 0 on pod-a: model.pt, written ")
        assert final_word(records).endswith(" s before its workers ended)")


def test_rank_0_lines_say_what_is_at_risk_and_what_was_saved() -> None:
    none_yet = {"who": "rank 0", "pod": "p", "ok": False, "error": "[Errno 30] Read-only",
                "saved_file": None, "at": 10.0}
    assert fault_line("rank0", none_yet) == (
        "rank 0 on p cannot checkpoint: [Errno 30] Read-only; the training since the start "
        "(no checkpoint yet) is lost if the workers restart, and the script's next save "
        "fails — fix the checkpoint directory (EDL_CHECKPOINT_DIR)")
    fine = {**none_yet, "ok": True, "error": "", "final": True}
    assert final_word({"rank0": fine}) == (
        "no checkpoint saved (rank 0 on p: no checkpoint file in EDL_CHECKPOINT_DIR)")
    stopped = {**fine, "final": False, "saved_file": "m.pt", "saved_at": 7.5}
    assert final_word({"rank0": stopped}) == (
        "last state saved (rank 0 on p: m.pt, written 2.5 s before its last probe)")
