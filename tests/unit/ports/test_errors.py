"""API failures as fabricsched's types: every client failure maps to one, chained to its cause."""

from __future__ import annotations

import pytest
import urllib3
from kubernetes.client import exceptions

from fabricsched.ports import errors


def failing(error: BaseException) -> object:
    raise error


@pytest.mark.parametrize(("status", "kind"), [
    (400, errors.Rejected), (422, errors.Rejected), (404, errors.NotFound), (409, errors.Conflict),
    (401, errors.Forbidden), (403, errors.Forbidden), (429, errors.Unavailable), (500, errors.Unavailable),
    (503, errors.Unavailable), (410, errors.Unavailable),
], ids=lambda v: str(v) if isinstance(v, int) else v.__name__)
def test_each_status_raises_its_type_chained_to_the_client_exception(status: int, kind: type) -> None:
    cause = exceptions.ApiException(status=status, reason="Because")
    with pytest.raises(kind) as raised:
        errors.call(failing, cause)
    assert raised.value.status == status and raised.value.__cause__ is cause
    assert type(raised.value) is kind  # not a broader class: callers dispatch on it


def test_no_answer_at_all_is_unavailable() -> None:
    cause = urllib3.exceptions.MaxRetryError(None, "/apis", "connection refused")  # type: ignore[arg-type]
    with pytest.raises(errors.Unavailable) as raised:
        errors.call(failing, cause)
    assert raised.value.status == 0 and raised.value.__cause__ is cause


def test_a_huge_server_message_is_cut_short() -> None:
    cause = exceptions.ApiException(status=422, reason="Invalid")
    cause.body = "x" * 100_000
    with pytest.raises(errors.Rejected) as raised:
        errors.call(failing, cause)
    assert len(str(raised.value)) < errors.MAX_DETAIL + 40


def test_an_answer_is_returned_unchanged() -> None:
    assert errors.call(lambda a, b: {"a": a, "b": b}, 1, b=2) == {"a": 1, "b": 2}
