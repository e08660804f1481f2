"""fabricsched: topology- and health-aware placement of GPU training gangs on InfiniBand/RoCE fabrics."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

Registrar = Callable[["argparse._SubParsersAction[argparse.ArgumentParser]"], None]


def _registrars() -> list[Registrar]:
    # Each adapter registers its own subcommands; imported lazily so `fabricsched --help`
    # stays fast and a missing optional dependency only breaks its own command.
    found: list[Registrar] = []
    for module_name in ("fabricsched.cluster.commands", "fabricsched.app.commands",
                        "fabricsched.sim.commands"):
        try:
            module = __import__(module_name, fromlist=["register"])
        except ModuleNotFoundError as e:
            if e.name != module_name:
                raise
            continue
        found.append(module.register)
    return found


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fabricsched", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for register in _registrars():
        register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.handler
    return handler(args)


if __name__ == "__main__":
    sys.exit(main())
