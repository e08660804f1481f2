"""Kubernetes OpenAPI extensions attached to model fields, for the CRD generator.

The models carry their own API-server rules (CEL validations, list semantics) through
pydantic's ``json_schema_extra``, next to the pydantic validators that enforce the same
rule in Python: one place to read a field's contract, and ``fabricsched.api.crd`` copies
the extensions into the CRD unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic.config import JsonDict, JsonValue

ListType = Literal["atomic", "set", "map"]


def cel(
    rule: str, message: str, *, field_path: str | None = None, reason: str | None = None
) -> JsonDict:
    """One ``x-kubernetes-validations`` entry.

    ``field_path`` (e.g. ``.links``) points the API server's error at the offending field
    rather than at the object holding the rule; ``reason`` is a ``FieldValue*`` cause.
    """
    entry: JsonDict = {"rule": rule, "message": message}
    if field_path is not None:
        entry["fieldPath"] = field_path
    if reason is not None:
        entry["reason"] = reason
    return entry


def extensions(
    *,
    validations: Sequence[JsonDict] = (),
    list_type: ListType | None = None,
    list_map_keys: Sequence[str] = (),
) -> JsonDict:
    """``json_schema_extra`` for a field or model: CEL rules and list semantics.

    ``list_type="map"`` needs ``list_map_keys``: fields every item has (required or
    defaulted), which the API server then keeps unique and server-side apply merges by.
    """
    if (list_type == "map") != bool(list_map_keys):
        raise ValueError("list_map_keys go with list_type='map' and only with it")
    extra: JsonDict = {}
    if list_type is not None:
        extra["x-kubernetes-list-type"] = list_type
    if list_map_keys:
        keys: list[JsonValue] = list(list_map_keys)
        extra["x-kubernetes-list-map-keys"] = keys
    if validations:
        rules: list[JsonValue] = list(validations)
        extra["x-kubernetes-validations"] = rules
    return extra
