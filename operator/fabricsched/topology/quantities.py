"""Kubernetes resource quantities ("8", "1k", "500m", "2Gi") as numbers.

Only what the fabric needs: GPU counts and other extended resources, which Kubernetes
requires to be whole numbers. Parsing lives in the core because node and pod manifests
arrive here raw (``kubectl get -o yaml`` strings), from the operator and the simulator alike.
"""

from __future__ import annotations

import decimal
import math

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": decimal.Decimal("1e-9"), "u": decimal.Decimal("1e-6"), "m": decimal.Decimal("1e-3"),
            "": decimal.Decimal(1), "k": decimal.Decimal("1e3"), "M": decimal.Decimal("1e6"),
            "G": decimal.Decimal("1e9"), "T": decimal.Decimal("1e12"), "P": decimal.Decimal("1e15"),
            "E": decimal.Decimal("1e18")}


def parse(quantity: str | int | float) -> decimal.Decimal:
    """The value of a quantity; raises ValueError for text that is not one (a broken manifest)."""
    if isinstance(quantity, bool):
        raise ValueError(f"not a quantity: {quantity!r}")
    if isinstance(quantity, int | float):
        return decimal.Decimal(str(quantity))
    text = quantity.strip()
    if text[-2:] in _BINARY:
        return _number(text[:-2], quantity) * _BINARY[text[-2:]]
    if text and text[-1] in _DECIMAL and not text[-1].isdigit():
        # "1E3" is an exponent, "1E" is exa: only a trailing letter after a digit is a suffix.
        return _number(text[:-1], quantity) * _DECIMAL[text[-1]]
    return _number(text, quantity)


def to_int(quantity: str | int | float) -> int:
    """Whole units, rounded up as Kubernetes does for ``Value()`` ("500m" GPUs is 1)."""
    return math.ceil(parse(quantity))


def _number(text: str, original: object) -> decimal.Decimal:
    try:
        value = decimal.Decimal(text)
    except decimal.InvalidOperation as e:
        raise ValueError(f"not a quantity: {original!r}") from e
    if not value.is_finite() or not text:
        raise ValueError(f"not a quantity: {original!r}")
    return value
