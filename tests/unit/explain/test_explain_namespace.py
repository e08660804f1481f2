"""NAME alone is looked up in the kubeconfig context's namespace, as kubectl does."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import yaml

from fabricsched.explain import access, commands

CLUSTER = {"name": "c", "cluster": {"server": "https://127.0.0.1:6443"}}
USER = {"name": "u", "user": {"token": "t"}}


def kubeconfig(path: Path, current: str, contexts: dict[str, str | None]) -> Path:
    entries = [
        {"name": name, "context": {"cluster": "c", "user": "u", **({"namespace": ns} if ns else {})}}
        for name, ns in contexts.items()
    ]
    body = {"apiVersion": "v1", "kind": "Config", "clusters": [CLUSTER], "users": [USER],
            "contexts": entries, "current-context": current}
    path.write_text(yaml.safe_dump(body))
    return path


@pytest.mark.parametrize(
    ("context", "expected"),
    [(None, "train"), ("other", "research"), ("bare", "default")],
    ids=["the current context's namespace", "the named context's namespace",
         "a context without one: default"],
)
def test_connect_reads_the_namespace_of_the_context_in_use(
    tmp_path: Path, context: str | None, expected: str
) -> None:
    path = kubeconfig(tmp_path / "config", "main", {"main": "train", "other": "research", "bare": None})
    api = access.connect(str(path), context, 1.0)
    try:
        assert api.namespace == expected
    finally:
        api.close()


@pytest.mark.parametrize(
    "entry",
    [None, {}, {"context": None}, {"context": {"namespace": "Not_A_Name"}},
     {"context": {"namespace": "x" * 64}}, {"context": {"namespace": 7}}],
    ids=["none", "empty", "null context", "not a DNS label", "too long", "not a string"],
)
def test_a_context_without_a_usable_namespace_means_default(entry: object) -> None:
    assert access.namespace_of_context(entry) == "default"


@pytest.mark.parametrize(
    ("target", "namespace", "expected"),
    [("train/a", None, ("train", "a")), ("a", None, (None, "a")), ("a", "ops", ("ops", "a")),
     ("ops/a", "ops", ("ops", "a")), ("ops/a", "train", None), ("a/b/c", None, None)],
    ids=["both given", "name alone: the context decides", "-n", "-n agreeing", "-n disagreeing",
         "two slashes"],
)
def test_the_target_leaves_the_namespace_open_when_nothing_names_it(
    target: str, namespace: str | None, expected: tuple[str | None, str] | None
) -> None:
    assert commands.target_of(argparse.Namespace(target=target, namespace=namespace)) == expected
