"""deploy/grafana-dashboard.json asks only for what the controller exports.

Every query's metric names, the labels it groups or filters by, the label values it
matches and the labels its legend prints are checked against a `ControllerMetrics` that
has seen a job, a tick, a decision and its watches: a renamed metric or label fails here,
not on a dashboard that silently shows "No data".
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from edl.accounting import ClusterResource
from edl.kube.metrics import ControllerMetrics

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana-dashboard.json"
PROMQL_WORDS = {"sum", "max", "min", "count", "by", "rate", "histogram_quantile", "without",
                "avg", "le", "increase"}


def exported() -> dict[str, dict[str, set[str]]]:
    """Each exported sample name -> its labels -> the values seen."""
    metrics = ControllerMetrics()
    metrics.leader.set(1)
    metrics.set_leading(True)
    metrics.observe_resources(ClusterResource(node_count=2, cpu_total_milli=8000))
    metrics.observe_jobs({("default", "digits"): (6, 4, 2)})
    metrics.observe_decision(2, 6)
    metrics.plan_duration.observe(0.01)
    for kind in ("Pod", "Node", "ResourceQuota"):
        metrics.observe_watch(kind, 0, 0.0)
    found: dict[str, dict[str, set[str]]] = {}
    for registry in (metrics.registry, metrics.leader_registry):
        for family in registry.collect():
            for sample in family.samples:
                labels = found.setdefault(sample.name, {})
                for key, value in sample.labels.items():
                    labels.setdefault(key, set()).add(value)
    return found


def queries() -> list[tuple[str, str, str]]:
    """(panel title, expression, legend) of every target."""
    board = json.loads(DASHBOARD.read_text())
    return [(panel["title"], target["expr"], target.get("legendFormat", ""))
            for panel in board["panels"] for target in panel["targets"]]


def test_the_dashboard_is_a_grafana_dashboard_with_unique_panels() -> None:
    board = json.loads(DASHBOARD.read_text())
    assert board["uid"] and board["schemaVersion"] >= 36
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids)) and len(ids) >= 8
    assert all(panel["datasource"]["uid"] == "${datasource}" for panel in board["panels"])


def variables() -> dict[str, dict]:
    board = json.loads(DASHBOARD.read_text())
    return {v["name"]: v for v in board["templating"]["list"]}


def test_namespace_and_job_variables_narrow_every_per_job_panel() -> None:
    """The variables list what the metrics carry (label_values of an exported metric and
    label); every query of a per-job metric is narrowed by both."""
    names = exported()
    found = variables()
    for name in ("namespace", "job"):
        query = found[name]["query"]["query"]
        metric, label = re.fullmatch(r"label_values\((edl_[a-z_]+)(?:\{[^}]*\})?, (\w+)\)",
                                     query).groups()
        assert label == name and name in names[metric], query
        assert found[name]["includeAll"] and found[name]["multi"]
    assert "$namespace" in found["job"]["query"]["query"]  # jobs of the chosen namespaces
    for title, expr, _ in queries():
        if "edl_job_trainers_" in expr:  # the metrics with namespace and job labels
            assert expr.count('namespace=~"$namespace", job=~"$job"') == \
                expr.count("edl_job_trainers_"), title


def test_every_query_names_an_exported_metric_and_label() -> None:
    names = exported()
    used: set[str] = set()
    assert queries()
    for title, expr, legend in queries():
        metrics = set(re.findall(r"\bedl_[a-z_]+\b", expr))
        assert metrics, f"{title}: no edl metric in {expr!r}"
        unknown = metrics - set(names)
        assert not unknown, f"{title}: {sorted(unknown)} not exported (have {sorted(names)})"
        used |= metrics
        labels = set().union(*(names[m] for m in metrics)) | {"le"}
        grouped = {w.strip() for group in re.findall(r"by \(([^)]*)\)", expr)
                   for w in group.split(",")}
        assert grouped <= labels, f"{title}: groups by {grouped - labels}"
        for metric, matchers in re.findall(r"\b(edl_[a-z_]+)\{([^}]*)\}", expr):
            for label, op, value in re.findall(r'(\w+)\s*(=~|!=|=)\s*"([^"]*)"', matchers):
                assert label in names[metric], f"{title}: {metric} has no label {label}"
                if value.startswith("$"):  # a dashboard variable (checked below)
                    assert value[1:] in variables(), f"{title}: no variable {value}"
                    continue
                wanted = set(value.split("|")) if op == "=~" else {value}
                assert wanted <= names[metric][label], f"{title}: {label} values {wanted}"
        printed = set(re.findall(r"\{\{(\w+)\}\}", legend))
        assert printed <= (grouped or labels), f"{title}: legend prints {printed - grouped}"
    # every metric the controller exports is on the dashboard somewhere
    families = {re.sub(r"_(bucket|sum|count|total|created)$", "", n) for n in names}
    shown = {re.sub(r"_(bucket|sum|count|total)$", "", n) for n in used}
    assert families - shown == set(), families - shown
