"""kube-scheduler extender wire types (k8s.io/kube-scheduler/extender/v1), as JSON.

Upstream declares these Go structs without JSON tags, so the keys on the wire are the Go
field names: PascalCase (``Pod``, ``NodeNames``, ``FailedAndUnresolvableNodes``). Python code
uses snake_case names; ``to_wire`` and the aliases give the exact keys.

Requests (what the scheduler sends) are validated strictly, so a malformed body fails with a
pydantic error naming the field; unknown keys are ignored, as the Go decoder does. Responses
(what we answer) forbid unknown keys and check scores, so our own bugs fail here.

With ``nodeCacheCapable: true`` the scheduler sends ``NodeNames`` (no ``Nodes``) and reads
``NodeNames`` back; otherwise it sends whole ``Nodes`` and reads ``Nodes`` back. A filter
answer with neither filters out every node, so ``ExtenderFilterResult.answering`` always
answers in the request's form.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, RootModel, field_validator

MIN_EXTENDER_PRIORITY = 0
MAX_EXTENDER_PRIORITY = 10
"""Extender scores range over 0..10; the scheduler scales them by the extender's weight."""


class _Wire(BaseModel):
    def to_wire(self) -> dict[str, Any]:
        """The JSON object with the scheduler's PascalCase keys; unset optional lists omitted."""
        return self.model_dump(by_alias=True, mode="json", exclude_none=True)


class _Request(_Wire):
    """What the scheduler sends: strict types, unknown keys ignored (as Go's decoder does)."""

    model_config = ConfigDict(
        frozen=True, strict=True, extra="ignore", validate_by_name=True, validate_by_alias=True,
        serialize_by_alias=True,
    )


class _Response(_Wire):
    """What we answer: strict types and no stray keys, so our own mistakes fail here."""

    model_config = ConfigDict(
        frozen=True, strict=True, extra="forbid", validate_by_name=True, validate_by_alias=True,
        serialize_by_alias=True,
    )


class NodeList(_Wire):
    """A v1 NodeList; items stay plain dicts, exactly as the API server serialised them."""

    model_config = ConfigDict(frozen=True, strict=True, extra="allow")

    items: list[dict[str, Any]] = Field(default_factory=list)

    @field_validator("items")
    @classmethod
    def _named(cls, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for i, node in enumerate(items):
            if not isinstance(_name_of(node), str):
                raise ValueError(f"items[{i}] has no metadata.name")
        return items

    def names(self) -> list[str]:
        return [str(_name_of(node)) for node in self.items]


def _name_of(obj: Mapping[str, Any]) -> object:
    metadata = obj.get("metadata")
    return metadata.get("name") if isinstance(metadata, Mapping) else None


class ExtenderArgs(_Request):
    """The body of a filter or prioritize call: the pod and its candidate nodes."""

    pod: dict[str, Any] = Field(alias="Pod", description="The v1 Pod being scheduled, as the API serves it.")
    nodes: NodeList | None = Field(
        default=None, alias="Nodes", description="Candidate nodes (nodeCacheCapable: false)."
    )
    node_names: list[str] | None = Field(
        default=None, alias="NodeNames", description="Candidate node names (nodeCacheCapable: true)."
    )

    @field_validator("pod")
    @classmethod
    def _pod_is_named(cls, pod: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(_name_of(pod), str):
            raise ValueError("Pod has no metadata.name")
        if not isinstance(pod.get("spec"), Mapping):
            raise ValueError("Pod has no spec object")
        return pod

    @property
    def node_cache_capable(self) -> bool:
        """True when the scheduler sent names only, and so expects names back."""
        return self.node_names is not None

    def candidate_names(self) -> list[str]:
        """Candidate node names, whichever form the scheduler used."""
        if self.node_names is not None:
            return list(self.node_names)
        return self.nodes.names() if self.nodes is not None else []


class ExtenderFilterResult(_Response):
    """The answer to a filter call."""

    nodes: NodeList | None = Field(default=None, alias="Nodes")
    node_names: list[str] | None = Field(default=None, alias="NodeNames")
    failed_nodes: dict[str, str] = Field(
        default_factory=dict, alias="FailedNodes", description="Node name -> why not (may change)."
    )
    failed_and_unresolvable_nodes: dict[str, str] = Field(
        default_factory=dict,
        alias="FailedAndUnresolvableNodes",
        description="Node name -> why not, where preempting pods would not help; wins over FailedNodes.",
    )
    error: str = Field(default="", alias="Error", description="Set only when the call itself failed.")

    @classmethod
    def answering(
        cls,
        args: ExtenderArgs,
        passed: Iterable[str],
        failed: Mapping[str, str] | None = None,
        unresolvable: Mapping[str, str] | None = None,
    ) -> ExtenderFilterResult:
        """The result in the form ``args`` asked for: names, or the passed nodes' objects."""
        keep = list(passed)
        failed_nodes = dict(failed or {})
        unresolvable_nodes = dict(unresolvable or {})
        if args.node_cache_capable or args.nodes is None:
            return cls(node_names=keep, failed_nodes=failed_nodes,
                       failed_and_unresolvable_nodes=unresolvable_nodes)
        wanted = set(keep)
        items = [node for node in args.nodes.items if _name_of(node) in wanted]
        return cls(nodes=NodeList(items=items), failed_nodes=failed_nodes,
                   failed_and_unresolvable_nodes=unresolvable_nodes)

    @classmethod
    def failure(cls, message: str) -> ExtenderFilterResult:
        """A call that could not be answered: the scheduler counts it as the extender's error."""
        return cls(error=message)


class HostPriority(_Response):
    """One node's score from a prioritize call; higher is better."""

    host: str = Field(alias="Host", min_length=1)
    score: int = Field(alias="Score", ge=MIN_EXTENDER_PRIORITY, le=MAX_EXTENDER_PRIORITY)


class HostPriorityList(RootModel[list[HostPriority]]):
    """The answer to a prioritize call: a JSON array of HostPriority."""

    model_config = ConfigDict(frozen=True, strict=True)

    def to_wire(self) -> list[dict[str, Any]]:
        return [host.to_wire() for host in self.root]

