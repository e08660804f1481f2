"""Who may be a victim: budgets, Kueue and the namespace opt-out (docs/preemption.md)."""

from __future__ import annotations

from fabricsched.extender.decide import budgets
from fabricsched.extender.kube import evictions
from fabricsched.topology import nodes


def pod(name: str, job: str, **labels: str) -> nodes.PodUsage:
    return nodes.PodUsage("ns", name, f"uid-{name}", None, "Running", labels={"job-name": job, **labels})


def pdb(name: str, job: str, allowed: int, generation: int = 1, observed: int = 1) -> dict[str, object]:
    return {"metadata": {"name": name, "generation": generation},
            "spec": {"selector": {"matchLabels": {"job-name": job}}},
            "status": {"disruptionsAllowed": allowed, "observedGeneration": observed}}


def test_a_budget_protects_a_workload_it_cannot_cover_whole() -> None:
    gang = [pod(f"a-{i}", "a") for i in range(4)]
    read = evictions.budgets_of({"items": [pdb("one", "a", 1)]})
    assert budgets.protected(gang, read)
    assert not budgets.protected(gang, evictions.budgets_of({"items": [pdb("all", "a", 4)]}))
    assert not budgets.protected(gang, evictions.budgets_of({"items": [pdb("other", "b", 0)]}))


def test_a_stale_budget_and_two_budgets_protect() -> None:
    gang = [pod("a-0", "a")]
    assert budgets.protected(gang, evictions.budgets_of({"items": [pdb("stale", "a", 5, 2, 1)]}))
    assert budgets.protected(gang, evictions.budgets_of({"items": [pdb("x", "a", 5), pdb("y", "a", 5)]}))


def test_kueue_and_the_opt_out_label() -> None:
    assert budgets.kueue_managed([pod("a-0", "a", **{"kueue.x-k8s.io/queue-name": "q"})])
    # Kueue v0.17 labels the pods of a workload it admitted (a JobSet's, a Job's) so.
    assert budgets.kueue_managed([pod("b-0", "b", **{"kueue.x-k8s.io/local-queue-name": "team"})])
    assert budgets.opted_out({budgets.OPT_OUT_LABEL: budgets.OPT_OUT_VALUE})
    assert not budgets.opted_out({budgets.OPT_OUT_LABEL: "yes"})


def test_priority_is_read_bounded_from_the_pod() -> None:
    manifest = {"metadata": {"name": "p", "namespace": "ns", "uid": "u"},
                "spec": {"priority": 10**12, "preemptionPolicy": "Never"}, "status": {}}
    read = nodes.PodUsage.from_manifest(manifest)
    assert (read.priority, read.preemption_policy) == (nodes.PRIORITY_BOUND, nodes.NEVER)
