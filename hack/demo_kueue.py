"""``make demo-kueue``: the demo's Kueue act. Kueue decides whether a JobSet starts, fabricsched
where its pods go, on the cluster ``make demo`` left running.

Flow: attach to the demo in ``--dir`` (its state file lists the control plane and ``fabricsched
run``, all alive); start the demo first when none runs there, or afresh when this act already
ran on it (its Kueue objects and webhooks would be in the way) -> the JobSet controller and
Kueue (the binaries ``make tools`` built), recorded in the demo's state file so ``make
demo-down`` stops them with the rest -> namespace ``queued``, a ClusterQueue of 32 GPUs (one
JobSet) and its LocalQueue -> the act (tests/integration/kueuedemo.py, which test_kueue.py
checks). Kueue and the JobSets are left running for ``kubectl``.

Runs from a source checkout only: Kueue's start-up lives in the integration test kits
(tests/integration/kueuekit.py), which the installed ``fabricsched`` does not ship.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "integration")]  # pytest's pythonpath

import kueuedemo  # noqa: E402
import kueuekit  # noqa: E402
import pytest  # noqa: E402
import yaml  # noqa: E402

from fabricsched.cluster import (  # noqa: E402
    binaries,
    components,
    controlplane,
    demo,
    errors,
    jobset,
    processes,
)
from fabricsched.ports import errors as api_errors  # noqa: E402

NAMESPACE = "queued"
CONTROLLERS = (jobset.COMPONENT, "kueue")
"""Components this act adds to the demo's state file."""


def attach(directory: Path) -> tuple[controlplane.ControlPlane | None, str]:
    """A handle on the demo running in ``directory`` fit for the act, or None and why not."""
    layout = components.Layout(directory)
    if not layout.state.exists():
        return None, f"no demo runs in {directory}: starting one"
    records, state = processes.read_state(layout.state)
    running = {r.component for r in records if processes.is_alive(r)}
    if demo.OPERATOR not in running or running != {r.component for r in records}:
        return None, f"the demo in {directory} is not (all) running: starting it afresh"
    if running & set(CONTROLLERS):
        return None, f"the Kueue act already ran on the demo in {directory}: starting the demo afresh"
    plane = controlplane.ControlPlane(
        dir=directory, kubeconfig=Path(state["kubeconfig"]), ports=components.Ports(**state["ports"]),
        binaries=binaries.find(), timings={})
    return plane, f"the demo running in {directory}"


def _keep(plane: controlplane.ControlPlane, record: processes.ProcessRecord) -> None:
    """``record`` added to the demo's state file: ``make demo-down`` stops it (first)."""
    layout = components.Layout(plane.dir)
    records, extra = processes.read_state(layout.state)
    processes.write_state(layout.state, [*records, record], extra)


def _epilogue(plane: controlplane.ControlPlane, act: kueuedemo.Act) -> str:
    kubectl = plane.binaries.kubectl
    explore = [
        f"export KUBECONFIG={shlex.quote(str(plane.kubeconfig))}",
        f"export PATH={shlex.quote(str(kubectl.parent))}:$PATH",
        f"kubectl -n {NAMESPACE} get jobsets,workloads.kueue.x-k8s.io,fabricplacements",
        f"kubectl get clusterqueue cq-{NAMESPACE} -o yaml",
        f"fabricsched explain {NAMESPACE}/{kueuedemo.SECOND}",
        f"less {shlex.quote(str(plane.dir / 'logs' / 'kueue.log'))}",
    ]
    return "\n".join(["", f"The act took {act.seconds:.1f} s. Kueue and the JobSets keep running. Explore:",
                      *[f"  {line}" for line in explore],
                      "Stop everything (Kueue too): make demo-down"])


def run(directory: Path, timeout: float) -> int:
    plane, how = attach(directory)
    print(f"==> {how}")
    if plane is None:
        demo.up(demo.DemoOptions(dir=directory, timeout=timeout))
        print("    (the tour's report: `make demo`)")
        plane, how = attach(directory)
        if plane is None:
            raise errors.ClusterError(how)
    print("==> the JobSet controller and Kueue "
          f"{kueuekit.kueue_version()} (TAS off), recorded in {directory}/state.json")
    _keep(plane, jobset.start(plane, timeout).record)
    _keep(plane, kueuekit.start(plane).record)
    with plane.client() as api:
        api.call("POST", "/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
        queue = kueuekit.queues(api, NAMESPACE, gpus=kueuedemo.RANKS * kueuedemo.GPUS, preemption=False)
        print(f"==> namespace {NAMESPACE}: ClusterQueue cq-{NAMESPACE} "
              f"({kueuedemo.RANKS * kueuedemo.GPUS} GPUs), LocalQueue {queue}")
        topology = yaml.safe_load(demo.DemoOptions().topology.read_text(encoding="utf-8"))["metadata"]["name"]
        act = kueuedemo.run(api, NAMESPACE, queue, topology, timeout=timeout)
    print(_epilogue(plane, act))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hack/demo_kueue.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, default=Path(".cluster"),
                        help="the demo's folder (default: %(default)s)")
    parser.add_argument("--timeout", type=float, default=90.0,
                        help="seconds each step may take (default: %(default)s)")
    args = parser.parse_args(argv)
    directory = args.dir.resolve()
    os.chdir(REPO)  # the demo's example files are named from the repository root
    t0 = time.monotonic()
    try:
        return run(directory, args.timeout)
    except (errors.ClusterError, api_errors.ApiError, OSError, ValueError) as e:
        print(f"make demo-kueue: error: {e}", file=sys.stderr)
    except (pytest.fail.Exception, pytest.skip.Exception) as e:  # the kits' waits and binary checks
        print(f"make demo-kueue: error after {time.monotonic() - t0:.0f} s: {e.msg}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
