"""deploy/monitoring.yaml: its alerts name metrics and labels edl exports (as the dashboard
test checks the dashboard), and its Service and ServiceMonitor reach the controller pods
of deploy/controller.yaml on their metrics port."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from kube.test_dashboard import exported

ROOT = Path(__file__).resolve().parents[2]


def objects(name: str) -> dict[str, dict[str, Any]]:
    docs = yaml.safe_load_all((ROOT / "deploy" / name).read_text())
    return {d["kind"]: d for d in docs if d}


def test_every_alert_names_exported_metrics_and_labels() -> None:
    names = exported()
    rules = objects("monitoring.yaml")["PrometheusRule"]["spec"]["groups"][0]["rules"]
    alerts = {rule["alert"] for rule in rules}
    assert {"EdlNoLeader", "EdlWatchStale", "EdlJobBelowMin", "EdlPodCreatesRefused"} <= alerts
    for rule in rules:
        expr = rule["expr"]
        metrics = set(re.findall(r"\bedl_[a-z_]+\b", expr))
        assert metrics and metrics <= set(names), (rule["alert"], metrics - set(names))
        labels = set().union(*(names[m] for m in metrics)) | {"le"}
        grouped = {w.strip() for g in re.findall(r"by \(([^)]*)\)", expr) for w in g.split(",")}
        assert grouped <= labels, (rule["alert"], grouped - labels)
        for metric, matchers in re.findall(r"\b(edl_[a-z_]+)\{([^}]*)\}", expr):
            for label, value in re.findall(r'(\w+)\s*=\s*"([^"]*)"', matchers):
                assert value in names[metric][label], (rule["alert"], label, value)
        used = set(re.findall(r"\$labels\.(\w+)", str(rule["annotations"])))
        assert used <= grouped, (rule["alert"], used - grouped)  # what the alert carries
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}
        assert rule["annotations"]["summary"]


def test_the_service_monitor_scrapes_the_controller_pods() -> None:
    found = objects("monitoring.yaml")
    deployment = objects("controller.yaml")["Deployment"]
    pod = deployment["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    service = found["Service"]
    assert service["metadata"]["namespace"] == deployment["metadata"]["namespace"]
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    (port,) = service["spec"]["ports"]
    assert port["targetPort"] in ports
    assert any(a.endswith(f"0.0.0.0:{ports[port['targetPort']]}") for a in container["args"])
    monitor = found["ServiceMonitor"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= \
        service["metadata"]["labels"].items()
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == [port["name"]]
