"""The JSON Schema -> structural OpenAPI v3.0 translation, on small models."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, Field

from fabricsched.api import crd, openapi
from fabricsched.api.base import WireModel


class Inner(WireModel):
    """Inner docstring."""

    count: int = Field(default=3, ge=0, description="How many.")


class Plain(WireModel):
    """Plain docstring."""

    note: str = Field(default="", description="A note.")


class Outer(WireModel):
    """Outer docstring."""

    described: Inner = Field(default_factory=Inner, description="Field text wins over the docstring.")
    undescribed: Plain = Field(default_factory=Plain)
    maybe_ratio: float | None = Field(default=None, gt=0, le=1, description="Optional, bounded.")
    labels: dict[str, str] = Field(default_factory=dict, description="A map.")
    names: list[str] = Field(
        default_factory=lambda: ["a"], max_length=4, description="Listed.",
        json_schema_extra=openapi.extensions(list_type="set"),
    )
    empty: list[int] = Field(default_factory=list, description="Empty by default.")
    kind: str = Field(pattern="^[a-z]+$", max_length=10, description="Patterned.")


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    return crd.structural(Outer)


def test_refs_are_inlined_and_a_field_description_beats_the_class_docstring(schema: dict[str, Any]) -> None:
    props = schema["properties"]
    assert props["described"]["description"] == "Field text wins over the docstring."
    assert props["described"]["properties"]["count"] == {
        "type": "integer", "description": "How many.", "default": 3, "minimum": 0,
    }
    assert props["undescribed"]["description"] == "Plain docstring."


def test_optional_becomes_the_plain_type_with_its_bounds(schema: dict[str, Any]) -> None:
    assert schema["properties"]["maybeRatio"] == {
        "type": "number", "description": "Optional, bounded.",
        "minimum": 0, "exclusiveMinimum": True, "maximum": 1,
    }


def test_default_factories_become_defaults_and_empty_collections_stay_unset(schema: dict[str, Any]) -> None:
    props = schema["properties"]
    assert props["described"]["default"] == {}, "nested defaults exist, so {} lets the server fill them"
    assert props["undescribed"]["default"] == {}
    assert props["names"]["default"] == ["a"]
    assert "default" not in props["empty"] and "default" not in props["labels"]


def test_maps_lists_and_string_bounds_are_kept(schema: dict[str, Any]) -> None:
    props = schema["properties"]
    assert props["labels"]["additionalProperties"] == {"type": "string"}
    assert props["names"]["x-kubernetes-list-type"] == "set" and props["names"]["maxItems"] == 4
    assert props["kind"] == {
        "type": "string", "description": "Patterned.", "maxLength": 10, "pattern": "^[a-z]+$",
    }
    assert schema["required"] == ["kind"]
    assert "additionalProperties" not in schema and "title" not in schema


class Loose(BaseModel):
    anything: Any


class Either(BaseModel):
    value: int | str


class Unique(BaseModel):
    tags: set[str]


@pytest.mark.parametrize(
    ("model", "complaint"),
    [(Loose, "needs a type"), (Either, "only `X | None` unions"), (Unique, "uniqueItems")],
    ids=["an untyped field is refused", "a real union is refused", "a set type is refused for uniqueItems"],
)
def test_constructs_without_a_structural_form_are_refused(model: type[BaseModel], complaint: str) -> None:
    with pytest.raises(crd.SchemaError, match=complaint):
        crd.structural(model)


def test_map_list_without_keys_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="list_map_keys"):
        openapi.extensions(list_type="map")
