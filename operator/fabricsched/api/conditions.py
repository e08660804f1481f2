"""Status conditions (a standard ``metav1.Condition``) and the one rule for carrying them over.

A condition's ``lastTransitionTime`` says when its status last changed, so a status
recomputed from scratch must keep the time of every condition whose status is unchanged:
``transition`` is that rule, used by every condition fabricsched writes.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from pydantic import Field

from fabricsched.api import rfc3339
from fabricsched.api.base import WireModel

MAX_MESSAGE = 32768

Status = Literal["True", "False", "Unknown"]


class Condition(WireModel):
    """A standard metav1.Condition."""

    type: str = Field(max_length=316, description="Condition type: Ready or Degraded.")
    status: Status = Field(description="True, False or Unknown.")
    reason: str = Field(max_length=1024, description="CamelCase reason for the last transition.")
    message: str = Field(default="", max_length=MAX_MESSAGE, description="Human-readable details.")
    last_transition_time: str = Field(description="When status last changed (RFC 3339).")
    observed_generation: int | None = Field(
        default=None, ge=0, description="metadata.generation the condition was set for."
    )


def transition(
    previous: Iterable[Condition],
    type: str,
    status: Status,
    reason: str,
    message: str,
    now: float,
    generation: int | None,
) -> Condition:
    """The condition ``type`` as of ``now``: dated ``now`` when its status differs from the
    previous one of that type (or there is none), else dated as before."""
    old = next((c for c in previous if c.type == type), None)
    since = rfc3339.format_epoch(now) if old is None or old.status != status else old.last_transition_time
    return Condition(
        type=type, status=status, reason=reason, message=message[:MAX_MESSAGE],
        last_transition_time=since, observed_generation=generation,
    )
