"""One AdmissionReview in, one answer out, with nothing kept between the two (no I/O).

The envelope is read strictly and only as far as needed: a review that is not the CREATE of a
pod (an UPDATE, a DELETE, a subresource, another kind) is answered ``allowed`` and unpatched
as soon as its ``request`` says so; its object is never looked at. Nothing of any review
outlives the call: no record per uid, no cache (a per-uid record was how a stream of UPDATE
reviews with fresh uids grew the process without bound under kopf's admission server).

A body that is not an AdmissionReview (not JSON, no ``request``, no string ``uid``) raises
``BadReview``; the server answers 400 and the API server, with ``failurePolicy: Ignore``,
admits the pod unchanged. The answer is never ``allowed: false``.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fabricsched import parsing
from fabricsched.webhook import mutation
from fabricsched.webhook import options as webhook_options

logger = logging.getLogger(__name__)

API_VERSION = "admission.k8s.io/v1"


class BadReview(ValueError):
    """Not an AdmissionReview; the message is bounded and safe to echo."""


@dataclass(frozen=True)
class Answer:
    body: bytes
    """The AdmissionReview response, JSON."""
    patched: bool
    """Whether the answer sets the scheduler name."""


def answer(raw: bytes, options: webhook_options.WebhookOptions) -> Answer:
    """The response to the review ``raw``; raises ``BadReview`` when ``raw`` is not one."""
    try:
        review = json.loads(raw)
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise BadReview(f"not JSON: {parsing.truncate(str(e), 120)}") from None
    if not isinstance(review, dict) or not isinstance(review.get("request"), dict):
        raise BadReview("no request object")
    request: dict[str, Any] = review["request"]
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise BadReview("request.uid is not a non-empty string")
    version = review.get("apiVersion")
    version = version if version in (API_VERSION, "admission.k8s.io/v1beta1") else API_VERSION
    if not _creates_a_pod(request):
        return Answer(_encode(version, uid, None), patched=False)
    name = _pod_name(request)
    try:
        decision = mutation.decide("CREATE", request.get("object"), options)
    except Exception:  # the pod must never be blocked by us: log, admit unchanged
        logger.exception("pod %s left alone after an unexpected error", name)
        return Answer(_encode(version, uid, None), patched=False)
    level = logging.WARNING if decision.malformed else logging.INFO \
        if decision.scheduler_name is not None else logging.DEBUG
    said = "scheduler name set:" if decision.scheduler_name is not None else "left alone:"
    logger.log(level, "pod %s: %s %s", name, said, decision.reason)
    if decision.scheduler_name is None:
        return Answer(_encode(version, uid, None), patched=False)
    spec = request["object"]["spec"]  # read by the decision: a mapping
    op = "replace" if "schedulerName" in spec else "add"
    patch = [{"op": op, "path": "/spec/schedulerName", "value": decision.scheduler_name}]
    return Answer(_encode(version, uid, patch), patched=True)


def _creates_a_pod(request: Mapping[str, Any]) -> bool:
    kind = request.get("kind")
    resource = request.get("resource")
    return (
        request.get("operation") == "CREATE"
        and not request.get("subResource")
        and isinstance(kind, dict) and kind.get("group", "") == "" and kind.get("kind") == "Pod"
        and isinstance(resource, dict) and resource.get("group", "") == ""
        and resource.get("resource") == "pods"
    )


def _encode(version: str, uid: str, patch: list[dict[str, str]] | None) -> bytes:
    response: dict[str, Any] = {"uid": uid, "allowed": True}
    if patch is not None:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode("ascii")
    return json.dumps({"apiVersion": version, "kind": "AdmissionReview", "response": response}).encode()


def _pod_name(request: Mapping[str, Any]) -> str:
    body = request.get("object")
    metadata = body.get("metadata") if isinstance(body, Mapping) else None
    if not isinstance(metadata, Mapping):
        return "(no metadata)"
    namespace = request.get("namespace") or metadata.get("namespace")
    name = parsing.excerpt(metadata.get("name") or metadata.get("generateName") or request.get("name"))
    return f"{parsing.excerpt(namespace)}/{name}" if namespace else name
