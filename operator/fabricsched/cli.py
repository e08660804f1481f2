"""fabricsched: topology- and health-aware placement of GPU training gangs on InfiniBand/RoCE fabrics."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from fabricsched import __version__
from fabricsched.app import commands as run_commands
from fabricsched.cluster import commands as cluster_commands
from fabricsched.diagnose import commands as diagnose_commands
from fabricsched.explain import commands as explain_commands
from fabricsched.sim import commands as sim_commands

Registrar = Callable[["argparse._SubParsersAction[argparse.ArgumentParser]"], None]

REGISTRARS: tuple[Registrar, ...] = (
    cluster_commands.register,
    run_commands.register,
    sim_commands.register,
    explain_commands.register,
    diagnose_commands.register,
)
"""Each adapter registers its own subcommands (``cluster``, ``run``, ``sim``)."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fabricsched", description=__doc__)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for register in REGISTRARS:
        register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.handler
    return handler(args)


if __name__ == "__main__":
    sys.exit(main())
