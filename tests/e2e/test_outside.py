"""docs/kubernetes.md, "Run the controller from your laptop", on the real control plane.

The shipped manifests are applied unchanged (conftest.py); the controller runs outside the
cluster with a kubeconfig holding a token of its ServiceAccount (TokenRequest, what
`kubectl create token` asks for) and **no flags** but its identity, listen address and
the loops' periods (1 s ticks: what is checked is the reaction, not the period): the
defaults must work with deploy/rbac.yaml. Then what a first
contact checks: readiness that is false, and says why, while the Lease is refused; a
standby that exports only `edl_leader 0`; a deleted job's series gone; a log with a
start-up line and without one line per request.
"""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from pathlib import Path

from e2e.helpers import SYSTEM_NAMESPACE, Controller, start_controller_process, trainingjob
from e2e.rest import Rest
from polling import wait_until

# Only the loops' periods, as every e2e test (docs/testing.md): the Lease keeps its
# production timings, and no --lease-namespace is given: the default is under test.
FAST = ["--interval=1", "--status-interval=0.5"]


def get(controller: Controller, path: str) -> tuple[int, str]:
    url = f"http://127.0.0.1:{controller.port}{path}"
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    except OSError:
        return 0, ""  # not listening yet


def samples(text: str) -> list[str]:
    return [line for line in text.splitlines() if line and not line.startswith("#")]


def test_the_controller_from_a_laptop_with_the_shipped_manifests(
        rest: Rest, namespace: str, controller_kubeconfig: Path, tmp_path: Path) -> None:
    started: list[Controller] = []

    def start(identity: str, *extra: str) -> Controller:
        controller = start_controller_process(
            controller_kubeconfig, tmp_path / f"{identity}.log", identity, *FAST, *extra)
        started.append(controller)
        return controller

    try:
        leader = start("laptop-a")
        wait_until(lambda: (rest.find("Lease", "edl-controller", SYSTEM_NAMESPACE) or {})
                   .get("spec", {}).get("holderIdentity") == "laptop-a", 60,
                   "laptop-a holds the Lease in edl-system, with no --lease-namespace given")
        wait_until(lambda: get(leader, "/readyz") == (200, "leader, caches synced\n"), 60,
                   "the leader ready")

        # A second one stands by: ready (it can read the Lease), exporting edl_leader 0 only.
        standby = start("laptop-b")
        wait_until(lambda: get(standby, "/readyz")[0] == 200, 60, "the standby ready")
        assert get(standby, "/readyz")[1].startswith("standby")
        assert samples(get(standby, "/metrics")[1]) == ["edl_leader 0.0"]

        # One told to use a Lease its Role does not grant: not ready, and it says why.
        refused = start("laptop-c", "--lease-namespace=default")
        _, text = wait_until(lambda: (r := get(refused, "/readyz"))[0] == 503 and r, 60,
                                "the refused replica unready")
        assert text.startswith("standby, cannot use the leader Lease default/edl-controller: "
                               "403"), text
        assert "--lease-namespace=default right?" in text, text
        assert samples(get(refused, "/metrics")[1]) == ["edl_leader 0.0"]

        # The leader's per-job series live as long as the job.
        rest.create(trainingjob("outside", min_instance=1, max_instance=2), namespace)
        series = f'edl_job_trainers_desired{{job="outside",namespace="{namespace}"}}'
        wait_until(lambda: series in get(leader, "/metrics")[1], 60, "the job's series")
        rest.delete("TrainingJob", "outside", namespace)
        wait_until(lambda: series not in get(leader, "/metrics")[1], 60,
                   "the deleted job's series removed")
        kinds = re.findall(r'^edl_scale_decisions_total\{kind="(\w+)"\}',
                           get(leader, "/metrics")[1], re.M)
        assert sorted(kinds) == ["grow", "hold", "shrink"]
    finally:
        for controller in started:
            controller.stop()

    for controller in started[:2]:  # the two with the shipped grants were never refused
        assert controller.forbidden_lines() == [], controller.text()[-3000:]
        assert controller.proc.returncode == 0, controller.text()[-3000:]
        log = controller.text()
        (startup,) = [line for line in log.splitlines() if "edl controller 0." in line]
        for part in ("API server https://127.0.0.1:", f"identity {controller.identity}",
                     "namespaces all", "Lease edl-system/edl-controller", "policy default"):
            assert part in startup, startup
        assert "HTTP Request:" not in log  # one line per API request: only with -v
        assert "Handler '" not in log  # kopf's line per handled event: only with -v
        assert "OS signals are ignored" not in log
    # the refusal is logged once, not at every retry (every 2 s)
    refusals = [line for line in started[2].text().splitlines() if "lease acquire failed" in line]
    assert len(refusals) == 1, refusals[:3]
