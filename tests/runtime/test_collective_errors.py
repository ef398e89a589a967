"""A collective job's errors: the script's own line out of torchrun's output, torch's
restart lines, and the rendezvous store that stops on SIGTERM whichever thread the
kernel hands the signal to (real processes)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from edl.runtime.collective.agent import CRASH_LOOP_FAILURES, _Failures
from edl.runtime.collective.failures import ScriptErrors
from edl.runtime.collective.launch import config_from_env

# what torchrun's stderr looks like when a worker raised and torch gave up
WORKER_TRACEBACK = """\
Traceback (most recent call last):
  File "/work/train.py", line 12, in <module>
    main()
  File "/work/train.py", line 9, in main
    raise ValueError("bad learning rate: -1")
ValueError: bad learning rate: -1
"""
TORCH_REPORT = """\
Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/torch/distributed/run.py", line 905, in main
    run(args)
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-01_16:10:00
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 1234)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================
"""
CLOSED = """\
Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/torch/distributed/elastic/agent/server/api.py", line 1
    raise RendezvousClosedError
torch.distributed.elastic.rendezvous.api.RendezvousClosedError
"""
RESTART = ("2026-12-01 16:10:01 agent INFO torch.distributed.elastic.agent.server.api: "
           "[default] Worker group FAILED. 3/3 attempts left; will restart worker group\n")


def feed(errors: ScriptErrors, text: str) -> list[object]:
    return [r for r in (errors.feed(line) for line in text.splitlines(True)) if r is not None]


def test_the_scripts_exception_line_is_the_reason_not_torchs_banner() -> None:
    errors = ScriptErrors()
    feed(errors, WORKER_TRACEBACK + TORCH_REPORT)
    assert errors.reason("traceback : To enable traceback see: …") == (
        "ValueError: bad learning rate: -1")
    assert errors.torch_error.startswith("torch.distributed.elastic.multiprocessing.errors")


def test_an_agent_whose_rendezvous_was_closed_still_names_its_scripts_error() -> None:
    errors = ScriptErrors()
    feed(errors, WORKER_TRACEBACK + CLOSED)
    assert errors.reason("") == "ValueError: bad learning rate: -1"
    only_torch = ScriptErrors()
    feed(only_torch, CLOSED)
    assert only_torch.reason("last line") == "RendezvousClosedError"
    assert ScriptErrors().reason("last line") == "last line"


def test_each_restart_torch_counts_is_reported_with_the_scripts_error() -> None:
    errors = ScriptErrors()
    restarts = feed(errors, WORKER_TRACEBACK + RESTART + WORKER_TRACEBACK + RESTART.replace(
        "3/3", "2/3"))
    assert [(r.left, r.limit, r.error) for r in restarts] == [  # type: ignore[attr-defined]
        (2, 3, "ValueError: bad learning rate: -1"), (1, 3, "ValueError: bad learning rate: -1")]
    assert errors.failures == 2


def _ranked(rank: int, text: str) -> list[str]:
    return [f"[rank{rank}]: {line}" for line in text.splitlines(True)]


# torch 2.13, one worker raising after init_process_group (the script)
AFTER_INIT_REPORT = TORCH_REPORT.replace("exitcode  : 1", "exitcode  : 1 (pid: 12514)")


def test_a_script_that_raised_after_init_process_group_is_read_through_the_rank_prefix() -> None:
    errors = ScriptErrors()
    feed(errors, "".join(_ranked(0, WORKER_TRACEBACK)) + AFTER_INIT_REPORT)
    assert errors.reason("") == "ValueError: bad learning rate: -1"
    restarts = feed(errors, "".join(_ranked(1, WORKER_TRACEBACK)) + RESTART)
    assert [r.error for r in restarts] == ["ValueError: bad learning rate: -1"]  # type: ignore[attr-defined]


LOST_PEER = """Traceback (most recent call last):
  File "/work/train.py", line 8, in <module>
    dist.barrier()
RuntimeError: [gloo/transport/tcp/pair.cc:534] Connection closed by peer [127.0.0.1]:5
"""


def test_of_interleaved_ranks_the_one_that_raised_is_named_not_its_peers_lost_connection() -> None:
    raised, peer = _ranked(1, WORKER_TRACEBACK), _ranked(0, LOST_PEER)
    interleaved = [line for pair in zip(peer, raised, strict=False) for line in pair]
    interleaved += raised[len(peer):]
    errors = ScriptErrors()
    restarts = feed(errors, "".join(interleaved) + RESTART)
    assert [r.error for r in restarts] == ["ValueError: bad learning rate: -1"]  # type: ignore[attr-defined]
    only_peer = ScriptErrors()
    feed(only_peer, "".join(_ranked(0, LOST_PEER)))
    assert "Connection closed by peer" in only_peer.reason("")


def test_a_chained_exception_is_named_by_its_last_line_and_a_missing_script_by_python() -> None:
    read_only = WORKER_TRACEBACK.replace("ValueError: bad learning rate: -1",
                                         "OSError: [Errno 30] Read-only file system")
    chained = (WORKER_TRACEBACK + "\nDuring handling of the above exception, another "
               "exception occurred:\n\n" + read_only)
    errors = ScriptErrors()
    feed(errors, "".join(_ranked(0, chained)))
    assert errors.reason("") == "OSError: [Errno 30] Read-only file system"
    missing = ScriptErrors()
    feed(missing, "/venv/bin/python3.11: can't open file '/ws/train.py': [Errno 2] No such file "
         "or directory\n" + RESTART)
    assert missing.reason("").startswith("/venv/bin/python3.11: can't open file '/ws/train.py'")


def test_the_agent_ends_a_crash_loop_of_one_error_but_not_of_errors_between_progress() -> None:
    config = config_from_env({"EDL_TRAINERS": "1", "EDL_ENTRYPOINT": "python t.py"})
    stopped: list[str] = []
    failures = _Failures({}, config, stopped.append)

    def fail(text: str, times: int, left: int = 100) -> None:
        for n in range(times):
            for line in (text + RESTART.replace("3/3", f"{left - n}/100")).splitlines(True):
                failures.feed(line)

    fail("".join(_ranked(0, LOST_PEER)), 5)  # a peer's failures: never a crash loop
    fail(WORKER_TRACEBACK, CRASH_LOOP_FAILURES - 1)
    failures.errors.progress()  # the script printed a metric line: it got further
    fail(WORKER_TRACEBACK, CRASH_LOOP_FAILURES - 1)
    assert stopped == [] and failures.crash_loop == ""
    fail(WORKER_TRACEBACK, 1)
    assert stopped == ["ValueError: bad learning rate: -1"]
    assert failures.crash_loop == "ValueError: bad learning rate: -1"


def test_progress_after_an_error_means_a_later_failure_is_not_blamed_on_it() -> None:
    errors = ScriptErrors()
    feed(errors, WORKER_TRACEBACK)
    errors.progress()  # the restarted script reported an epoch
    feed(errors, CLOSED)
    assert errors.reason("") == "RendezvousClosedError"


@given(st.lists(st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=40),
                max_size=30))
def test_any_output_is_read_without_error(lines: list[str]) -> None:
    errors = ScriptErrors()
    for line in lines:
        errors.feed(line)
    assert isinstance(errors.reason("x"), str)


SIGTERM_BIT = 1 << (signal.SIGTERM - 1)
SIGINT_BIT = 1 << (signal.SIGINT - 1)


def _blocked(pid: int, tid: str) -> int:
    for line in Path(f"/proc/{pid}/task/{tid}/status").read_text().splitlines():
        if line.startswith("SigBlk:"):
            return int(line.split()[1], 16)
    raise AssertionError("no SigBlk line")


def test_the_rendezvous_store_stops_on_sigterm_and_only_its_main_thread_takes_it(
    tmp_path: Path,
) -> None:
    """A SIGTERM the kernel gave to torch's store thread left the process asleep until
    SIGKILL (exit 137 at the end of a successful run); now only the main thread can
    receive it, and it exits 0 at once."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EDL_")}
    log = tmp_path / "rendezvous.log"
    with log.open("w") as out:
        child = subprocess.Popen(
            [sys.executable, "-m", "edl.cli.main", "rendezvous", "--port", "0",
             "--host", "127.0.0.1"], env=env, stdout=out, stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 120
        while "listening on" not in log.read_text():
            assert child.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "the store did not start"
            time.sleep(0.2)
        threads = sorted(os.listdir(f"/proc/{child.pid}/task"))
        others = [tid for tid in threads if tid != str(child.pid)]
        assert others, "torch's store runs a thread of its own"
        for tid in others:
            assert _blocked(child.pid, tid) & (SIGTERM_BIT | SIGINT_BIT) == (
                SIGTERM_BIT | SIGINT_BIT), f"thread {tid} could take SIGTERM"
        started = time.monotonic()
        child.send_signal(signal.SIGTERM)
        assert child.wait(timeout=10) == 0
        assert time.monotonic() - started < 5
        assert "SIGTERM received" in log.read_text()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
