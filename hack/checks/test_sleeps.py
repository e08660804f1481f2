"""Sleep check for test folders: no fixed sleep outside the one waiting module.

Run by ``make lint`` on ``tests/integration``: a test that sleeps stands a fixed time in for a
state it could observe (flaky on a loaded machine, slow on an idle one). Waiting belongs in
``waiting.py`` (``wait_for``, ``holds_for``, ``paced``), so every other module of the folder must
not sleep. Pure standard library; reads the sources with ``ast``, imports nothing it checks.

It fails (exit status 1), naming file, line and column, on any use of ``time.sleep`` or
``asyncio.sleep`` outside a file named as ``--allow`` (default ``waiting.py``):

* ``time.sleep(...)`` / ``asyncio.sleep(...)`` through the module, whatever it is bound to
  (``import time as t`` then ``t.sleep(1)``), called or passed on as a value;
* ``from time import sleep`` / ``from asyncio import sleep`` (aliased too): the import itself,
  and every use of the name it binds.

Usage: ``python hack/checks/test_sleeps.py [DIR ...]`` (default ``tests/integration``).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import sys
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

DEFAULT_DIR = Path("tests/integration")
ALLOWED = "waiting.py"
SLEEPING_MODULES = frozenset({"time", "asyncio"})


@dataclasses.dataclass(frozen=True)
class Finding:
    path: Path
    line: int
    column: int
    what: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}:{self.column}: {self.what} outside the waiting module: wait on state"


def _bindings(tree: ast.AST) -> tuple[dict[str, str], dict[str, str], list[tuple[ast.ImportFrom, str]]]:
    """Names bound to a sleeping module (name -> module), names bound to its ``sleep`` (name ->
    ``module.sleep``), and the ``from ... import sleep`` statements, anywhere in the file."""
    modules: dict[str, str] = {}
    functions: dict[str, str] = {}
    imports: list[tuple[ast.ImportFrom, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in SLEEPING_MODULES:
                    modules[alias.asname or alias.name] = alias.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in SLEEPING_MODULES:
            for alias in node.names:
                if alias.name == "sleep":
                    functions[alias.asname or alias.name] = f"{node.module}.sleep"
                    imports.append((node, f"from {node.module} import sleep"))
    return modules, functions, imports


def check_source(path: Path, source: str) -> list[Finding]:
    """The sleeps of one file's ``source`` (``path`` names it in the findings)."""
    tree = ast.parse(source, filename=str(path))
    modules, functions, imports = _bindings(tree)
    found = [Finding(path, node.lineno, node.col_offset + 1, what) for node, what in imports]
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr == "sleep" and isinstance(node.value, ast.Name)
                and node.value.id in modules):
            found.append(Finding(path, node.lineno, node.col_offset + 1, f"{modules[node.value.id]}.sleep"))
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in functions:
            found.append(Finding(path, node.lineno, node.col_offset + 1, functions[node.id]))
    return sorted(found, key=lambda f: (f.line, f.column))


def python_files(roots: Iterable[Path]) -> Iterator[Path]:
    for root in roots:
        yield from ([root] if root.is_file() else sorted(root.rglob("*.py")))


def check(roots: Iterable[Path], allowed: str = ALLOWED) -> list[Finding]:
    """Every sleep under ``roots`` outside files named ``allowed``."""
    found: list[Finding] = []
    for path in python_files(roots):
        if path.name != allowed:
            found.extend(check_source(path, path.read_text(encoding="utf-8")))
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("dirs", nargs="*", type=Path, default=[DEFAULT_DIR])
    parser.add_argument("--allow", default=ALLOWED, help="the one file name that may sleep")
    args = parser.parse_args(argv)
    missing = [d for d in args.dirs if not d.exists()]
    if missing:
        print(f"no such file or folder: {', '.join(map(str, missing))}", file=sys.stderr)
        return 2
    findings = check(args.dirs, args.allow)
    for finding in findings:
        print(finding)
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
