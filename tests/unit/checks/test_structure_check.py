"""hack/checks/structure.py on tiny synthetic packages: each rule fires on the case it is for, reports
where, and stays quiet on a clean package."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from checks_harness import CHECKS_DIR, WritePackage


def body(lines: int, indent: int = 4) -> str:
    """``lines`` statements, one per line, at ``indent`` spaces."""
    return "".join(f"{' ' * indent}x{i} = {i}\n" for i in range(lines))


CLEAN = {
    "models.py": "from dataclasses import dataclass\n\n@dataclass\nclass Thing:\n    name: str\n",
    "core/logic.py": (
        "from pkg import models\nfrom ..models import Thing\n\ndef f(t: Thing) -> str:\n    return t.name\n"
    ),
    "adapters/run.py": (
        "import json\nfrom typing import TYPE_CHECKING\nfrom pkg.core import logic\n"
        "if TYPE_CHECKING:\n    from pkg import models\n\n"
        "def main() -> None:\n    from pkg.core.logic import f\n    print(json.dumps(f))\n"
    ),
}


def test_a_clean_package_has_no_findings(structure: ModuleType, write_package: WritePackage) -> None:
    assert structure.check(write_package(CLEAN)) == []


def test_a_cycle_through_a_function_level_import_is_reported_as_a_chain(
    structure: ModuleType, write_package: WritePackage
) -> None:
    root = write_package(
        {
            "placing.py": "from pkg import reasons\n\ndef place() -> None:\n    reasons.why()\n",
            "reasons.py": "def why() -> None:\n    from pkg.placing import place\n    place()\n",
        }
    )
    [finding] = structure.check(root)
    assert finding.rule == "import-cycle"
    assert finding.message.startswith("pkg.placing -> pkg.reasons -> pkg.placing ")
    assert "pkg.reasons:2 (function-level)" in finding.message
    assert "pkg.placing:1 (top-level)" in finding.message
    assert finding.path == root / "placing.py"


def test_a_cycle_under_type_checking_counts(structure: ModuleType, write_package: WritePackage) -> None:
    root = write_package(
        {
            "a.py": (
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.b import B\nclass A: ...\n"
            ),
            "b.py": "import typing\nif typing.TYPE_CHECKING:\n    from . import a\nclass B: ...\n",
        }
    )
    [finding] = structure.check(root)
    assert finding.message.startswith("pkg.a -> pkg.b -> pkg.a ")
    assert "pkg.a:3 (TYPE_CHECKING)" in finding.message
    assert "pkg.b:3 (TYPE_CHECKING)" in finding.message


def test_a_string_import_of_a_module_constant_counts(
    structure: ModuleType, write_package: WritePackage
) -> None:
    root = write_package(
        {
            "running.py": (
                'import importlib\nSERVICE = "pkg.service"\n\n'
                "def load() -> object:\n    return importlib.import_module(SERVICE)\n"
            ),
            "service.py": "from pkg import running\n",
        }
    )
    [finding] = structure.check(root)
    assert "pkg.running:5 (string)" in finding.message


def test_a_three_module_cycle_names_every_member(structure: ModuleType, write_package: WritePackage) -> None:
    root = write_package(
        {
            "sub/__init__.py": "",
            "sub/a.py": "from . import b\n",
            "sub/b.py": "from pkg.sub import c\n",
            "sub/c.py": "import pkg.sub.a\n",
            "other.py": "from pkg.sub import a\n",  # imports into the cycle, is not part of it
        }
    )
    [finding] = structure.check(root)
    assert finding.message.startswith("pkg.sub.a -> pkg.sub.b -> pkg.sub.c -> pkg.sub.a ")
    assert "other" not in finding.message


def test_importing_a_name_from_a_package_init_is_an_edge_to_the_init(
    structure: ModuleType, write_package: WritePackage
) -> None:
    root = write_package(
        {"__init__.py": "from pkg.api import Thing\n", "api.py": "from pkg import VERSION\nThing = 1\n"}
    )
    [finding] = structure.check(root)
    assert finding.message.startswith("pkg -> pkg.api -> pkg ")


def test_a_method_over_the_limit_is_reported_with_its_qualified_name(
    structure: ModuleType, write_package: WritePackage
) -> None:
    # decorator + def + 79 statements = 81 lines; the module function beside it is exactly at the limit
    method = f"class Tour:\n    @staticmethod\n    def up() -> None:\n{body(79, indent=8)}"
    root = write_package({"demo.py": f"{method}\n\ndef fits() -> None:\n{body(79)}"})
    [finding] = structure.check(root)
    assert (finding.rule, finding.line) == ("function-too-long", 3)
    assert finding.message == "pkg.demo.Tour.up has 81 lines (limit 80)"


def test_function_length_counts_decorators_and_the_last_line(
    structure: ModuleType, write_package: WritePackage
) -> None:
    root = write_package({"m.py": f"import functools\n\n@functools.cache\ndef f() -> None:\n{body(80)}"})
    [finding] = structure.check(root)
    assert finding.rule == "function-too-long"
    assert finding.message == "pkg.m.f has 82 lines (limit 80)"
    assert finding.line == 4
    assert structure.check(root, max_function=82) == []


def test_a_nested_function_is_checked_on_its_own(structure: ModuleType, write_package: WritePackage) -> None:
    root = write_package({"m.py": f"def outer() -> None:\n    def inner() -> None:\n{body(85, indent=8)}"})
    names = sorted(f.message.split(" has ")[0] for f in structure.check(root))
    assert names == ["pkg.m.outer", "pkg.m.outer.inner"]


def test_a_module_over_the_limit_is_reported(structure: ModuleType, write_package: WritePackage) -> None:
    root = write_package({"big.py": "x = 1\n" * 501, "ok.py": "x = 1\n" * 500})
    [finding] = structure.check(root)
    assert (finding.rule, finding.line, finding.message) == (
        "module-too-long",
        1,
        "pkg.big has 501 lines (limit 500)",
    )


@pytest.mark.parametrize(
    ("files", "status"),
    [
        pytest.param(CLEAN, 0, id="a clean package exits 0 and prints nothing"),
        pytest.param({"a.py": "import pkg.b\n", "b.py": "import pkg.a\n"}, 1, id="a cycle exits 1"),
    ],
)
def test_the_command_line_exit_status(
    write_package: WritePackage, files: dict[str, str], status: int
) -> None:
    root = write_package(files)
    result = subprocess.run(
        [sys.executable, str(CHECKS_DIR / "structure.py"), str(root)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == status, result.stderr
    assert (result.stdout == "") == (status == 0)


def test_the_command_line_rejects_a_folder_that_is_not_a_package(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(CHECKS_DIR / "structure.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "not a package" in result.stderr
