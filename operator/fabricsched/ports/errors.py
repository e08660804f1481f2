"""Failures of API server calls, as fabricsched's own types.

Every kubernetes client call of the adapters goes through ``call``, which raises one of
these chained with ``from e``, so callers decide on the kind of failure (retry, give up,
treat as gone) without knowing the client's exceptions; nothing else escapes for an API
failure. ``of_status`` maps an HTTP status to its type.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import urllib3
from kubernetes.client import exceptions


class ApiError(Exception):
    """An API server call failed; ``status`` is the HTTP status (0: no answer at all)."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class Rejected(ApiError):
    """The API server refused the object as invalid (400, 422): retrying it cannot help."""


class NotFound(ApiError):
    """The object (or its namespace) does not exist (404)."""


class Conflict(ApiError):
    """The object exists already, or changed since it was read (409)."""


class Forbidden(ApiError):
    """Not authenticated or not allowed (401, 403): a deployment problem, not a transient one."""


class Unavailable(ApiError):
    """No answer, a timeout, throttling or a server error (429, 5xx): worth a retry later."""


_BY_STATUS: dict[int, type[ApiError]] = {
    400: Rejected, 422: Rejected, 404: NotFound, 409: Conflict, 401: Forbidden, 403: Forbidden,
}

MAX_DETAIL = 512
"""Bound on the server's text kept in a message (a rejection can echo a whole object)."""


def type_of(status: int) -> type[ApiError]:
    """The error type for an HTTP status; every status without a type of its own is ``Unavailable``."""
    return _BY_STATUS.get(status, Unavailable)


def of_status(status: int | None, reason: str | None, detail: object = "") -> ApiError:
    """The error for an HTTP answer."""
    code = int(status or 0)
    text = f"{code} {reason or ''}".strip()
    body = str(detail or "")[:MAX_DETAIL]
    return type_of(code)(f"{text}: {body}" if body else text, code)


def call(method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``method(*args, **kwargs)`` of the kubernetes client, its failures as ``ApiError``s."""
    try:
        return method(*args, **kwargs)
    except exceptions.ApiException as e:
        raise of_status(e.status, e.reason, e.body) from e
    except (urllib3.exceptions.HTTPError, OSError) as e:
        raise Unavailable(f"no answer from the API server: {e}"[:MAX_DETAIL]) from e
