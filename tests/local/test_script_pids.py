"""`procs.script_pids`: a job's worker processes found by marker, script and launcher."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from edl.local import procs
from polling import wait_until


def test_finds_the_scripts_processes_and_leaves_out_the_launcher(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("import time\ntime.sleep(60)\n")
    env = {**os.environ, "EDL_TEST_MARK": str(tmp_path)}
    worker = subprocess.Popen([sys.executable, str(script)], env=env)
    # a launcher passing the script on: it names the module, so it is not a worker
    launcher = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)",
                                 "launcher.module", str(script)], env=env)
    other = subprocess.Popen([sys.executable, str(script)])  # no marker: another run's
    try:
        found = wait_until(lambda: procs.script_pids("EDL_TEST_MARK", str(tmp_path),
                                                     "train.py", not_module="launcher.module"),
                           10, "the worker")
        assert found == [worker.pid]
        both = procs.script_pids("EDL_TEST_MARK", str(tmp_path), "train.py")
        assert sorted(both) == sorted([worker.pid, launcher.pid])
    finally:
        for process in (worker, launcher, other):
            process.kill()
            process.wait()
