"""hack/checks/structure.py: no two public top-level classes share a name, and the extender's layout
(its code in sub-packages, only its composition root beside them, modules of at most 450 lines)."""

from __future__ import annotations

import subprocess
import sys
from types import ModuleType

from checks_harness import CHECKS_DIR, WritePackage

LAYERED = {
    "extender/__init__.py": '"""The extender."""\n',
    "extender/service.py": "from pkg.extender.http import server\n",
    "extender/decisions/coordinator.py": "x = 1\n",
    "extender/book/reservations.py": "x = 1\n",
    "extender/http/server.py": "x = 1\n",
}


def test_two_public_classes_of_one_name_are_reported_once_with_every_place(
    structure: ModuleType, write_package: WritePackage
) -> None:
    root = write_package(
        {
            "a.py": "class Snapshot:\n    pass\n",
            "sub/b.py": "import typing\n\n\nclass Snapshot(typing.NamedTuple):\n    x: int\n",
            "c.py": "class Other:\n    class Snapshot:\n        pass\n",  # nested: not top-level
        }
    )
    [finding] = structure.check(root)
    assert (finding.rule, finding.path, finding.line) == ("duplicate-class-name", root / "a.py", 1)
    assert finding.message == "Snapshot is defined in pkg.a:1, pkg.sub.b:4"


def test_private_classes_may_share_a_name(structure: ModuleType, write_package: WritePackage) -> None:
    root = write_package({"a.py": "class _Row:\n    pass\n", "b.py": "class _Row:\n    pass\n"})
    assert structure.check(root) == []


def test_the_extender_rules_are_on_by_default(structure: ModuleType, write_package: WritePackage) -> None:
    root = write_package({"extender/coordinator.py": "x = 1\n" * 451})
    assert structure.ENFORCE_EXTENDER_LAYOUT is True
    assert structure.check(root) != []
    assert structure.check(root, extender_layout=False) == []


def test_a_layered_extender_passes(structure: ModuleType, write_package: WritePackage) -> None:
    assert structure.check(write_package(LAYERED), extender_layout=True) == []


def test_an_extender_module_over_450_lines_is_reported_and_others_keep_500(
    structure: ModuleType, write_package: WritePackage
) -> None:
    root = write_package(
        {
            **LAYERED,
            "extender/book/reservations.py": "x = 1\n" * 451,
            "extender/http/server.py": "x = 1\n" * 450,
            "placement.py": "x = 1\n" * 500,
        }
    )
    [finding] = structure.check(root, extender_layout=True)
    assert (finding.rule, finding.path) == ("module-too-long", root / "extender/book/reservations.py")
    assert finding.message == "pkg.extender.book.reservations has 451 lines (limit 450 in pkg.extender)"


def test_a_module_beside_the_composition_root_is_reported(
    structure: ModuleType, write_package: WritePackage
) -> None:
    root = write_package({**LAYERED, "extender/planning.py": "x = 1\n"})
    [finding] = structure.check(root, extender_layout=True)
    assert (finding.rule, finding.path) == ("extender-layout", root / "extender/planning.py")
    assert finding.message.startswith("pkg.extender.planning sits directly in extender/")


def test_fewer_than_three_sub_packages_with_code_are_reported(
    structure: ModuleType, write_package: WritePackage
) -> None:
    files = {k: v for k, v in LAYERED.items() if not k.startswith("extender/http/")}
    root = write_package({**files, "extender/service.py": "", "extender/empty/__init__.py": ""})
    [finding] = structure.check(root, extender_layout=True)
    assert (finding.rule, finding.path) == ("extender-layout", root / "extender/__init__.py")
    assert "in 2 sub-package(s) (book, decisions); at least 3" in finding.message


def test_the_command_line_turns_the_extender_rules_off(write_package: WritePackage) -> None:
    root = write_package({**LAYERED, "extender/planning.py": "x = 1\n"})

    def run(*flags: str) -> int:
        command = [sys.executable, str(CHECKS_DIR / "structure.py"), *flags, str(root)]
        return subprocess.run(command, capture_output=True, timeout=60, check=False).returncode

    assert (run(), run("--extender-layout"), run("--no-extender-layout")) == (1, 1, 0)
