"""The package layout holds: no import cycles, the Kubernetes package's layers, small modules.

The import graph is read from the source (`importgraph`), so a new import that
breaks the layering fails here before it confuses a reader.
"""

from __future__ import annotations

import subprocess
import sys

from layout.importgraph import SRC, find_cycle, module_graph, modules, package_graph

MAX_MODULE_LINES = 450
GENERATED = ("_pb2.py", "_pb2_grpc.py")

# edl.kube, bottom to top: a module imports only from its own layer or the ones below.
KUBE_LAYERS = (
    ("client", "retry", "watch_stream", "crd_rules", "crd", "status", "events", "failures",
     "trainer_index"),
    ("reflector", "state", "managed", "training_jobs", "admission", "dry_run"),
    ("kueue",),
    ("cluster",),
    ("operator", "autoscaling", "throughput", "health", "leader", "metrics", "runner"),
)


def test_no_import_cycle_between_packages():
    graph = package_graph()
    assert {"edl.api", "edl.cluster", "edl.control", "edl.kube"} <= set(graph)
    assert find_cycle(graph) is None, f"package import cycle: {' -> '.join(find_cycle(graph))}"


def test_no_import_cycle_inside_any_package():
    for package in sorted(package_graph()):
        cycle = find_cycle(module_graph(package))
        assert cycle is None, f"import cycle in {package}: {' -> '.join(cycle)}"


def test_the_core_never_imports_the_shells():
    # The functional core (names, parsing, planning, accounting) knows nothing of
    # Kubernetes, processes, etcd or the simulator.
    graph = package_graph()
    shells = {"edl.kube", "edl.local", "edl.coord", "edl.sim", "edl.cli", "edl.runtime",
              "edl.elastic"}
    for core in ("edl.api", "edl.accounting", "edl.jobparser", "edl.policy", "edl.cluster",
                 "edl.control", "edl.throughput"):
        assert not graph.get(core, set()) & shells, f"{core} imports {graph[core] & shells}"


def test_kube_modules_import_only_downwards():
    layer = {f"edl.kube.{name}": i for i, names in enumerate(KUBE_LAYERS) for name in names}
    graph = module_graph("edl.kube")
    unplaced = sorted(set(graph) - set(layer) - {"edl.kube"})
    assert not unplaced, f"place these modules in KUBE_LAYERS: {unplaced}"
    upward = [
        f"{source} -> {target}"
        for source, targets in graph.items() if source != "edl.kube"
        for target in targets if layer.get(target, -1) > layer[source]
    ]
    assert not upward, f"imports from a lower layer to a higher one: {upward}"


def test_every_package_directory_is_a_regular_package():
    missing = [
        str(path.parent.relative_to(SRC))
        for _, path in modules()
        if not (path.parent / "__init__.py").exists()
    ]
    assert not missing, f"directories without __init__.py: {sorted(set(missing))}"


def test_no_hand_written_module_is_over_the_size_limit():
    oversized = {
        str(path.relative_to(SRC)): lines
        for _, path in modules()
        if not path.name.endswith(GENERATED)
        and (lines := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert not oversized, f"modules over {MAX_MODULE_LINES} lines: {oversized}"


def test_the_graph_builder_sees_cycles_and_layer_breaks(tmp_path):
    # The checks above are only as good as the graph they read: prove it finds a cycle
    # hidden behind a package __init__, a relative import and a function-level import.
    package = tmp_path / "edl"
    for directory in ("alpha", "beta"):
        (package / directory).mkdir(parents=True)
        (package / directory / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "alpha" / "one.py").write_text("from edl.beta import two\n")
    (package / "beta" / "two.py").write_text(
        "from . import three\n\ndef late():\n    import edl.alpha.one\n"
    )
    (package / "beta" / "three.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import edl.alpha\n"
    )
    graph = package_graph(tmp_path)
    assert graph == {"edl.alpha": {"edl.beta"}, "edl.beta": {"edl.alpha"}}
    assert find_cycle(graph) in (
        ["edl.alpha", "edl.beta", "edl.alpha"], ["edl.beta", "edl.alpha", "edl.beta"]
    )
    assert module_graph("edl.beta", tmp_path)["edl.beta.two"] == {"edl.beta.three"}


def test_the_per_pod_supervisors_do_not_import_torch():
    # `edl agent` (one per collective trainer pod), the master, the rendezvous store's
    # command and `edl run` only supervise or coordinate: importing torch would cost every
    # pod start about 2.5 CPU-seconds (docs/testing.md, "Where the CPU goes"). The
    # processes that compute (torchrun's, the script's, pservers, trainers) import it.
    supervisors = ("edl.cli.agent", "edl.runtime.collective.agent", "edl.cli.master",
                   "edl.runtime.master.main", "edl.cli.rendezvous", "edl.local.run")
    probe = (f"import sys\nimport {', '.join(supervisors)}\n"
             "print(' '.join(m for m in ('torch', 'sklearn', 'scipy') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [], f"imported by a supervisor: {done.stdout}"
