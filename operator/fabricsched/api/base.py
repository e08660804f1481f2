"""Shared pydantic configuration: camelCase on the wire, snake_case in Python."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class WireModel(BaseModel):
    """A Kubernetes-style object part: camelCase keys, unknown keys rejected."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )

    def to_wire(self) -> dict[str, object]:
        """The object as the API server stores it (aliases, no unset defaults dropped)."""
        return self.model_dump(by_alias=True, mode="json", exclude_none=True)
