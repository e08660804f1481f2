"""hack/checks/test_sleeps.py on small sources: every way of reaching ``time.sleep`` or
``asyncio.sleep`` is found with its line, the waiting module may sleep, and look-alikes pass."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest
from checks_harness import CHECKS_DIR

SLEEPING = {
    "time.sleep": ("import time\n\ntime.sleep(1)\n", [(3, "time.sleep")]),
    "asyncio.sleep": ("import asyncio\n\nasync def f():\n    await asyncio.sleep(1)\n",
                      [(4, "asyncio.sleep")]),
    "a module alias": ("import time as clock\n\nclock.sleep(0.5)\n", [(3, "time.sleep")]),
    "an import inside a function": ("def f():\n    import time\n    time.sleep(1)\n", [(3, "time.sleep")]),
    "from time import sleep": ("from time import sleep\n\nsleep(1)\n",
                               [(1, "from time import sleep"), (3, "time.sleep")]),
    "from asyncio import sleep as an alias": (
        "from asyncio import sleep as nap\n\nasync def f():\n    await nap(1)\n",
        [(1, "from asyncio import sleep"), (4, "asyncio.sleep")]),
    "sleep passed on uncalled": ("import time\n\nrun(time.sleep, 1)\n", [(3, "time.sleep")]),
    "two in one file": ("import time\nimport asyncio as aio\ntime.sleep(1)\nx = aio.sleep(2)\n",
                        [(3, "time.sleep"), (4, "asyncio.sleep")]),
}

QUIET = {
    "no sleep": "import time\n\nstarted = time.monotonic()\n",
    "a sleep in a string": 'SLEEPER = "import time; time.sleep(60)"\n',
    "another module's sleep": "import threading\nimport mylib\n\nmylib.sleep(1)\nthreading.Event().wait(1)\n",
    "a name sleep never imported from time": "def sleep(x):\n    return x\n\nsleep(1)\n",
    "a relative import named time": "from .time import sleep\n\nsleep(1)\n",
}


@pytest.mark.parametrize(("source", "expected"), SLEEPING.values(), ids=list(SLEEPING))
def test_each_way_to_sleep_is_found_with_its_line(
    sleeps: ModuleType, source: str, expected: list[tuple[int, str]]
) -> None:
    found = sleeps.check_source(Path("t.py"), source)
    assert [(f.line, f.what) for f in found] == expected


@pytest.mark.parametrize("source", QUIET.values(), ids=list(QUIET))
def test_look_alikes_pass(sleeps: ModuleType, source: str) -> None:
    assert sleeps.check_source(Path("t.py"), source) == []


def write(root: Path, files: dict[str, str]) -> Path:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    return root


def test_the_waiting_module_may_sleep_and_every_other_file_of_the_folder_is_read(
    sleeps: ModuleType, tmp_path: Path
) -> None:
    root = write(tmp_path / "integration", {
        "waiting.py": "import time\n\ndef wait():\n    time.sleep(0.2)\n",
        "test_a.py": "import time\n\ndef test_a():\n    time.sleep(1)\n",
        "sub/helper.py": "from time import sleep\n",
    })
    found = sleeps.check([root])
    assert [(f.path.name, f.line) for f in found] == [("helper.py", 1), ("test_a.py", 4)]


def test_the_command_exits_1_naming_file_and_line_and_0_on_a_clean_folder(tmp_path: Path) -> None:
    dirty = write(tmp_path / "dirty", {"test_x.py": "import asyncio\n\nasyncio.sleep(3)\n"})
    clean = write(tmp_path / "clean", {"test_y.py": "import time\n\ntime.monotonic()\n",
                                       "waiting.py": "import time\ntime.sleep(1)\n"})
    command = [sys.executable, str(CHECKS_DIR / "test_sleeps.py")]
    failed = subprocess.run([*command, str(dirty)], capture_output=True, text=True, check=False)
    assert failed.returncode == 1
    assert f"{dirty / 'test_x.py'}:3:1: asyncio.sleep" in failed.stdout
    passed = subprocess.run([*command, str(clean)], capture_output=True, text=True, check=False)
    assert passed.returncode == 0 and passed.stdout == ""


def test_the_integration_tests_sleep_only_in_waiting_py(sleeps: ModuleType) -> None:
    folder = CHECKS_DIR.parents[1] / "tests" / "integration"
    assert [str(f) for f in sleeps.check([folder])] == []
