"""The local control plane's API errors are the seam's ``ports.errors`` types, typed by status."""

from __future__ import annotations

import pytest

from fabricsched.cluster import errors
from fabricsched.ports import errors as api_errors


@pytest.mark.parametrize(
    ("status", "kind"),
    [(404, api_errors.NotFound), (409, api_errors.Conflict), (403, api_errors.Forbidden),
     (422, api_errors.Rejected), (500, api_errors.Unavailable)],
)
def test_an_error_answer_is_the_seams_type_for_its_status(
    status: int, kind: type[api_errors.ApiError]
) -> None:
    error = errors.api_error("DELETE", "/api/v1/nodes/n1", status, "no")
    assert type(error) is kind
    assert (str(error), error.status) == (f"DELETE /api/v1/nodes/n1: HTTP {status}: no", status)
