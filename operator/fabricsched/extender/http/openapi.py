"""The OpenAPI 3 document of the extender's endpoints, generated from the wire models.

Published at ``GET /openapi.json``; the schemas come from ``api.extender`` (requests in
validation mode, answers in serialization mode), so the document cannot drift from the code.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field
from pydantic.json_schema import models_json_schema

import fabricsched
from fabricsched.api import extender as wire

_REF = "#/components/schemas/{model}"


class ErrorBody(BaseModel):
    """The answer to a request that is not valid ExtenderArgs (HTTP 400) or that failed (500)."""

    error: str = Field(description="What was wrong, for the scheduler's log.")


def document() -> dict[str, Any]:
    refs, defs = models_json_schema(
        [
            (wire.ExtenderArgs, "validation"),
            (wire.ExtenderFilterResult, "serialization"),
            (wire.HostPriorityList, "serialization"),
            (ErrorBody, "serialization"),
        ],
        ref_template=_REF,
    )
    schemas: dict[str, Any] = dict(defs.get("$defs", {}))

    def ref(model: type[BaseModel], mode: str) -> dict[str, Any]:
        return dict(refs[(model, mode)])  # type: ignore[index]

    args = ref(wire.ExtenderArgs, "validation")
    errors = {
        "400": _response("Malformed, truncated or oversized body.", ref(ErrorBody, "serialization")),
    }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "fabricsched kube-scheduler extender",
            "version": fabricsched.__version__,
            "description": "Filter and prioritize verbs of the kube-scheduler extender v1 protocol "
            "(keys are Go field names, PascalCase). Only pods requesting the fabric's GPU resource are "
            "sent (managedResources); with nodeCacheCapable the scheduler sends and reads NodeNames.",
        },
        "paths": {
            "/filter": {
                "post": {
                    "operationId": "filter",
                    "summary": "Keep only the rank's planned node; with none left, say why for every node.",
                    "requestBody": {"required": True, "content": {"application/json": {"schema": args}}},
                    "responses": {
                        "200": _response("Filter result.", ref(wire.ExtenderFilterResult, "serialization")),
                        **errors,
                    },
                },
            },
            "/prioritize": {
                "post": {
                    "operationId": "prioritize",
                    "summary": "Score the planned node 10 and every other node 0.",
                    "requestBody": {"required": True, "content": {"application/json": {"schema": args}}},
                    "responses": {
                        "200": _response("Scores, 0..10.", ref(wire.HostPriorityList, "serialization")),
                        **errors,
                        "500": _response("The decision failed.", ref(ErrorBody, "serialization")),
                    },
                },
            },
        },
        "components": {"schemas": schemas},
    }


def _response(description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}
