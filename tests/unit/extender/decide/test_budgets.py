"""Who may be a victim: budgets, Kueue and the namespace opt-out (docs/preemption.md)."""

from __future__ import annotations

import dataclasses

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


def test_a_budget_covers_the_pods_its_selector_matches_on_any_label() -> None:
    (read,) = evictions.budgets_of({"items": [{
        "metadata": {"name": "web", "generation": 1}, "spec": {"selector": {"matchLabels": {"app": "web"}}},
        "status": {"disruptionsAllowed": 1, "observedGeneration": 1}}]})
    gang = [pod(f"a-{i}", "x", app="web") for i in range(2)]
    assert budgets.protected(gang, [read])
    assert not budgets.protected([pod("b-0", "x", app="db")], [read])


def test_a_pod_whose_labels_were_cut_is_covered_by_every_selector() -> None:
    (read,) = evictions.budgets_of({"items": [pdb("one", "a", 0)]})
    cut = dataclasses.replace(pod("z-0", "z"), labels_cut=True)
    assert budgets.protected([cut], [read])
    assert not budgets.protected([pod("z-0", "z")], [read])
    # A budget without a selector covers no pod, cut or not.
    status = {"disruptionsAllowed": 0, "observedGeneration": 1}
    (none,) = evictions.budgets_of({"items": [{"metadata": {"name": "n", "generation": 1}, "spec": {},
                                               "status": status}]})
    assert not budgets.protected([cut], [none])


def test_budgets_past_the_cap_protect_the_whole_namespace() -> None:
    every = budgets.covering_all(evictions.MORE_BUDGETS)
    assert budgets.protected([pod("z-0", "z")], [every])


def test_a_selector_in_the_api_syntax() -> None:
    (read,) = evictions.budgets_of({"items": [{
        "metadata": {"name": "q", "generation": 1},
        "spec": {"selector": {"matchLabels": {"app": "web"}, "matchExpressions": [
            {"key": "tier", "operator": "NotIn", "values": ["b", "a"]},
            {"key": "x", "operator": "DoesNotExist"}]}},
        "status": {"disruptionsAllowed": 0, "observedGeneration": 1}}]})
    assert read.selector is not None
    assert read.selector.query() == "app in (web),tier notin (a,b),!x"
    assert read.selector.matches({"app": "web", "tier": "c"})
    assert not read.selector.matches({"app": "web", "tier": "a"})
