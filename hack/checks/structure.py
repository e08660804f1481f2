"""Structure check for a Python package: import cycles and size limits.

Run by ``make lint`` on ``operator/fabricsched``; pure standard library, reads the sources with ``ast``
and imports nothing from the package it checks.

It fails (exit status 1) on:

* an import cycle among the package's modules. Every import counts, wherever it sits: at module level,
  inside a function (the "lazy import" that dodges a cycle at import time still couples the modules),
  under ``if TYPE_CHECKING:`` (the type checker sees the cycle), and ``importlib.import_module`` /
  ``__import__`` of a string literal or of a module-level string constant. A cycle is reported as a
  module chain with the file and line of each import in it;
* a module longer than ``--max-module-lines`` physical lines (default 500);
* a function or method longer than ``--max-function-lines`` physical lines (default 80), counted from
  its first decorator to its last line;
* two public (no leading underscore) top-level classes of the package with the same name: a reader
  meeting ``Snapshot`` should not have to ask which one;
* with ``--extender-layout`` (on when ``ENFORCE_EXTENDER_LAYOUT`` is): a module of the sub-package
  ``extender`` over 450 lines, an extender module sitting directly in ``extender/`` other than its
  composition root (``service.py``) and ``__init__.py``, or fewer than three sub-packages holding
  the extender's code.

Importing ``a.b.c`` is an edge to ``a.b.c`` only, not to the packages ``a`` and ``a.b`` that Python also
initialises: those parent edges are in every package and would make every ``__init__`` re-export a cycle.

Usage: ``python hack/checks/structure.py [PACKAGE_DIR ...]`` (default ``operator/fabricsched``).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import dataclasses
import itertools
import sys
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

DEFAULT_PACKAGE_DIR = Path("operator/fabricsched")
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80

EXTENDER = "extender"
"""The sub-package held to the stricter layout rules (issue 28)."""
EXTENDER_MAX_MODULE_LINES = 450
EXTENDER_MIN_SUBPACKAGES = 3
EXTENDER_ROOT_MODULES = frozenset({"__init__", "service"})
"""What may sit directly in ``extender/``: the package itself and its composition root."""
ENFORCE_EXTENDER_LAYOUT = True
"""The extender rules' default; False until the extender's move into sub-packages lands (then True)."""

# Where an import statement sits; a cycle's report names the kind of each of its imports.
TOP_LEVEL = "top-level"
FUNCTION_LEVEL = "function-level"
TYPE_CHECKING_ONLY = "TYPE_CHECKING"
STRING = "string"


@dataclasses.dataclass(frozen=True)
class Module:
    name: str
    """Dotted module name, e.g. ``fabricsched.placement.capacity`` (a package is its ``__init__``)."""
    path: Path
    source: str


@dataclasses.dataclass(frozen=True)
class Edge:
    """One import of a package module by another."""

    source: str
    target: str
    line: int
    kind: str


@dataclasses.dataclass(frozen=True)
class Finding:
    path: Path
    line: int
    rule: str
    message: str

    def render(self, relative_to: Path | None = None) -> str:
        path = self.path
        if relative_to is not None:
            with contextlib.suppress(ValueError):  # a path outside it stays as given
                path = path.resolve().relative_to(relative_to.resolve())
        return f"{path}:{self.line}: {self.rule}: {self.message}"


def discover(package_dir: Path) -> dict[str, Module]:
    """Every ``.py`` file under ``package_dir``, keyed by dotted name rooted at the package's own name."""
    package_dir = package_dir.resolve()
    root = package_dir.parent
    modules: dict[str, Module] = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        name = ".".join(parts)
        modules[name] = Module(name=name, path=path, source=path.read_text(encoding="utf-8"))
    return modules


def _is_type_checking_test(test: ast.expr) -> bool:
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def _string_constants(tree: ast.Module) -> dict[str, str]:
    """Module-level ``NAME = "a.b.c"`` assignments, so ``import_module(NAME)`` can be followed."""
    constants: dict[str, str] = {}
    for node in tree.body:
        value: ast.expr | None = None
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            value, targets = node.value, node.targets
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            value, targets = node.value, [node.target]
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            for target in targets:
                if isinstance(target, ast.Name):
                    constants[target.id] = value.value
    return constants


class _ImportCollector(ast.NodeVisitor):
    """Collects (imported dotted name, line, kind) for every import in one module."""

    def __init__(self, module: Module, constants: dict[str, str]) -> None:
        self.module = module
        self.constants = constants
        self.found: list[tuple[str, int, str]] = []
        self._function_depth = 0
        self._type_checking_depth = 0

    def _kind(self) -> str:
        if self._type_checking_depth:
            return TYPE_CHECKING_ONLY
        return FUNCTION_LEVEL if self._function_depth else TOP_LEVEL

    def _visit_function(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        self._function_depth += 1
        self.generic_visit(node)
        self._function_depth -= 1

    visit_FunctionDef = _visit_function
    visit_AsyncFunctionDef = _visit_function
    visit_Lambda = _visit_function

    def visit_If(self, node: ast.If) -> None:
        if not _is_type_checking_test(node.test):
            self.generic_visit(node)
            return
        self._type_checking_depth += 1
        for child in node.body:
            self.visit(child)
        self._type_checking_depth -= 1
        for child in node.orelse:
            self.visit(child)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.found.append((alias.name, node.lineno, self._kind()))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = self._resolve_from(node)
        if base is None:
            return
        for alias in node.names:
            # `from a import b` imports the module a.b when there is one, else a name from a.
            candidate = f"{base}.{alias.name}" if alias.name != "*" else base
            self.found.append((candidate, node.lineno, self._kind()))

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        called = ""
        if isinstance(func, ast.Attribute):
            called = func.attr
        elif isinstance(func, ast.Name):
            called = func.id
        if called in ("import_module", "__import__") and node.args:
            target = self._string_value(node.args[0])
            if target is not None:
                self.found.append((target, node.lineno, STRING))
        self.generic_visit(node)

    def _string_value(self, arg: ast.expr) -> str | None:
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            return arg.value
        if isinstance(arg, ast.Name):
            return self.constants.get(arg.id)
        return None

    def _resolve_from(self, node: ast.ImportFrom) -> str | None:
        if node.level == 0:
            return node.module
        is_package = self.module.path.name == "__init__.py"
        parts = self.module.name.split(".")
        if not is_package:
            parts = parts[:-1]
        drop = node.level - 1
        if drop > len(parts) - 1:
            return None  # beyond the top package: not ours to follow
        parts = parts[: len(parts) - drop]
        return ".".join([*parts, node.module] if node.module else parts)


def _owning_module(dotted: str, modules: dict[str, Module]) -> str | None:
    """The most specific package module that ``dotted`` names (``a.b.func`` -> ``a.b``), if any."""
    parts = dotted.split(".")
    while parts:
        name = ".".join(parts)
        if name in modules:
            return name
        parts.pop()
    return None


def import_edges(modules: dict[str, Module]) -> list[Edge]:
    """Imports between modules of the package; imports of other packages and of oneself are dropped."""
    edges: list[Edge] = []
    for module in modules.values():
        tree = ast.parse(module.source, filename=str(module.path))
        collector = _ImportCollector(module, _string_constants(tree))
        collector.visit(tree)
        for dotted, line, kind in collector.found:
            target = _owning_module(dotted, modules)
            if target is not None and target != module.name:
                edges.append(Edge(source=module.name, target=target, line=line, kind=kind))
    return edges


def strongly_connected(nodes: Iterable[str], graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative (no recursion limit on deep chains); components sorted by name."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for root in sorted(nodes):
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            advanced = False
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = counter
                    counter += 1
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph.get(successor, ())))))
                    advanced = True
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(sorted(component))
    return sorted(components)


def shortest_cycle(start: str, members: set[str], graph: dict[str, set[str]]) -> list[str]:
    """A shortest chain ``start -> ... -> start`` inside one strongly connected component (BFS)."""
    parents: dict[str, str] = {}
    frontier = [start]
    seen = {start}
    while frontier:
        following: list[str] = []
        for node in frontier:
            for successor in sorted(graph.get(node, set()) & members):
                if successor == start:
                    chain = [node]
                    while chain[-1] != start:
                        chain.append(parents[chain[-1]])
                    return [*reversed(chain), start]
                if successor not in seen:
                    seen.add(successor)
                    parents[successor] = node
                    following.append(successor)
        frontier = following
    raise AssertionError(f"{start} is in a component but on no cycle")


def cycle_findings(modules: dict[str, Module], edges: Sequence[Edge]) -> list[Finding]:
    """One finding per import cycle (strongly connected component), shown as its shortest chain."""
    graph: dict[str, set[str]] = {}
    first_edge: dict[tuple[str, str], Edge] = {}
    for edge in sorted(edges, key=lambda e: (e.source, e.target, e.line)):
        graph.setdefault(edge.source, set()).add(edge.target)
        first_edge.setdefault((edge.source, edge.target), edge)
    findings: list[Finding] = []
    for component in strongly_connected(modules, graph):
        if len(component) < 2:
            continue
        chain = shortest_cycle(component[0], set(component), graph)
        hops = [first_edge[(a, b)] for a, b in itertools.pairwise(chain)]
        described = " -> ".join(chain)
        where = "; ".join(f"{h.source}:{h.line} ({h.kind})" for h in hops)
        others = sorted(set(component) - set(chain))
        extra = f"; also in this cycle: {', '.join(others)}" if others else ""
        findings.append(
            Finding(
                path=modules[chain[0]].path,
                line=hops[0].line,
                rule="import-cycle",
                message=f"{described} [imports at {where}]{extra}",
            )
        )
    return findings


FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef


def _functions(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, FunctionNode]]:
    """Every function and method with its qualified name (``Class.method``, ``outer.inner``)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            qualified = f"{prefix}{node.name}"
            yield qualified, node
            yield from _functions(node, f"{qualified}.")
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node, f"{prefix}{node.name}.")
        else:
            yield from _functions(node, prefix)


def function_length(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Physical lines from the first decorator (or ``def``) to the last line of the body."""
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    last = node.end_lineno if node.end_lineno is not None else node.lineno
    return last - first + 1


def size_findings(modules: dict[str, Module], max_module: int, max_function: int) -> list[Finding]:
    findings: list[Finding] = []
    for module in modules.values():
        lines = len(module.source.splitlines())
        if lines > max_module:
            message = f"{module.name} has {lines} lines (limit {max_module})"
            findings.append(Finding(module.path, 1, "module-too-long", message))
        tree = ast.parse(module.source, filename=str(module.path))
        for qualified, node in _functions(tree):
            length = function_length(node)
            if length > max_function:
                findings.append(
                    Finding(
                        module.path,
                        node.lineno,
                        "function-too-long",
                        f"{module.name}.{qualified} has {length} lines (limit {max_function})",
                    )
                )
    return findings


def _top_level_classes(module: Module) -> Iterator[ast.ClassDef]:
    tree = ast.parse(module.source, filename=str(module.path))
    yield from (node for node in tree.body if isinstance(node, ast.ClassDef))


def duplicate_class_findings(modules: dict[str, Module]) -> list[Finding]:
    """One finding per public top-level class name defined in more than one place, at its first."""
    where: dict[str, list[tuple[Module, int]]] = {}
    for module in sorted(modules.values(), key=lambda m: m.name):
        for node in _top_level_classes(module):
            if not node.name.startswith("_"):
                where.setdefault(node.name, []).append((module, node.lineno))
    findings: list[Finding] = []
    for name, places in sorted(where.items()):
        if len(places) > 1:
            listed = ", ".join(f"{m.name}:{line}" for m, line in places)
            first, line = places[0]
            message = f"{name} is defined in {listed}"
            findings.append(Finding(first.path, line, "duplicate-class-name", message))
    return findings


def extender_findings(modules: dict[str, Module], package: str) -> list[Finding]:
    """The extender's layout: its code in sub-packages, only its root beside them, smaller modules."""
    prefix = f"{package}.{EXTENDER}"
    ours = {n: m for n, m in modules.items() if n == prefix or n.startswith(f"{prefix}.")}
    if prefix not in ours:
        return []
    findings: list[Finding] = []
    subpackages: set[str] = set()
    for name, module in sorted(ours.items()):
        lines = len(module.source.splitlines())
        if lines > EXTENDER_MAX_MODULE_LINES:
            message = f"{name} has {lines} lines (limit {EXTENDER_MAX_MODULE_LINES} in {prefix})"
            findings.append(Finding(module.path, 1, "module-too-long", message))
        parts = name[len(prefix) + 1 :].split(".") if name != prefix else []
        is_init = module.path.name == "__init__.py"
        if len(parts) == 1 and not is_init and parts[0] not in EXTENDER_ROOT_MODULES:
            allowed = ", ".join(sorted(EXTENDER_ROOT_MODULES))
            message = f"{name} sits directly in {EXTENDER}/: only {allowed} may; move it into its layer's"
            findings.append(Finding(module.path, 1, "extender-layout", message + " sub-package"))
        if len(parts) >= 2 or (len(parts) == 1 and is_init and module.source.strip()):
            subpackages.add(parts[0])  # a sub-package with a module, or with code in its __init__
    if len(subpackages) < EXTENDER_MIN_SUBPACKAGES:
        found = ", ".join(sorted(subpackages)) or "none"
        message = (f"{prefix} has its code in {len(subpackages)} sub-package(s) ({found}); "
                   f"at least {EXTENDER_MIN_SUBPACKAGES} are wanted, one per layer")
        findings.append(Finding(ours[prefix].path, 1, "extender-layout", message))
    return findings


def check(
    package_dir: Path,
    max_module: int = MAX_MODULE_LINES,
    max_function: int = MAX_FUNCTION_LINES,
    extender_layout: bool = ENFORCE_EXTENDER_LAYOUT,
) -> list[Finding]:
    """All findings for one package directory: cycles, then sizes, then class names, then (if asked)
    the extender's layout, each group by path and line."""
    modules = discover(package_dir)
    cycles = cycle_findings(modules, import_edges(modules))
    sizes = size_findings(modules, max_module, max_function)
    names = duplicate_class_findings(modules)
    layout = extender_findings(modules, package_dir.resolve().name) if extender_layout else []
    return [*sorted(cycles, key=_where), *sorted(sizes, key=_where), *names, *sorted(layout, key=_where)]


def _where(finding: Finding) -> tuple[str, int]:
    return str(finding.path), finding.line


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("package_dirs", nargs="*", type=Path, default=[DEFAULT_PACKAGE_DIR])
    parser.add_argument("--max-module-lines", type=int, default=MAX_MODULE_LINES)
    parser.add_argument("--max-function-lines", type=int, default=MAX_FUNCTION_LINES)
    parser.add_argument(
        "--extender-layout",
        action=argparse.BooleanOptionalAction,
        default=ENFORCE_EXTENDER_LAYOUT,
        help="check the extender's sub-packages and its 450-line limit",
    )
    args = parser.parse_args(argv)
    findings: list[Finding] = []
    for package_dir in args.package_dirs:
        if not (package_dir / "__init__.py").is_file():
            parser.error(f"{package_dir} is not a package (no __init__.py)")
        findings += check(package_dir, args.max_module_lines, args.max_function_lines, args.extender_layout)
    for finding in findings:
        print(finding.render(relative_to=Path.cwd()))
    if findings:
        print(f"structure: {len(findings)} finding(s)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
