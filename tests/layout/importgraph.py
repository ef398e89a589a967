"""The package import graph of ``src/edl``, read from the source with `ast`."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"


def modules(root: Path = SRC) -> Iterator[tuple[str, Path]]:
    """(dotted module name, path) of every module under ``root/edl``."""
    for path in sorted((root / "edl").rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        yield ".".join(parts), path


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports(module: str, path: Path, known: frozenset[str] = frozenset()) -> set[str]:
    """Every ``edl`` module this module imports at run time (anywhere in its body;
    ``if TYPE_CHECKING:`` blocks are annotations only and are left out).

    ``from package import name`` counts as importing ``package.name`` when that is
    one of the ``known`` modules, else as importing ``package``.
    """
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for other in child.orelse:
                    visit(other)
                continue
            if isinstance(child, ast.Import):
                found.update(a.name for a in child.names if a.name.startswith("edl"))
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = package.split(".")[: len(package.split(".")) - child.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                if base.startswith("edl"):
                    for alias in child.names:
                        submodule = f"{base}.{alias.name}"
                        found.add(submodule if submodule in known else base)
            visit(child)

    visit(tree)
    return found


def package_of(module: str) -> str:
    """``edl.<first part>``: the unit the layout rules speak of (``edl.kube``, ``edl.procs``)."""
    parts = module.split(".")
    return ".".join(parts[:2])


def package_graph(root: Path = SRC) -> dict[str, set[str]]:
    """package -> the other packages it imports."""
    graph: dict[str, set[str]] = {}
    known = frozenset(name for name, _ in modules(root))
    for module, path in modules(root):
        source = package_of(module)
        if source == "edl":
            continue
        targets = {package_of(t) for t in imports(module, path, known)} - {source, "edl"}
        graph.setdefault(source, set()).update(targets)
    return graph


def module_graph(package: str, root: Path = SRC) -> dict[str, set[str]]:
    """module -> the modules of the same package it imports."""
    graph: dict[str, set[str]] = {}
    known = frozenset(name for name, _ in modules(root))
    for module, path in modules(root):
        if module == package or module.startswith(package + "."):
            graph[module] = {
                t for t in imports(module, path, known)
                if t != module and (t == package or t.startswith(package + "."))
            }
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as a path ``[a, b, ..., a]``, or None."""
    state: dict[str, int] = {}  # 1 = on the stack, 2 = done
    stack: list[str] = []

    def walk(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt):], nxt]
            if nxt not in state:
                cycle = walk(nxt)
                if cycle:
                    return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = walk(node)
            if cycle:
                return cycle
    return None
