"""Kubernetes resource quantities ("8", "1k", "500m", "2Gi", "1e3") as whole numbers.

Only what the fabric needs: GPU counts and other extended resources, which Kubernetes
requires to be whole numbers. Parsing lives in the core because node and pod manifests
arrive here raw (``kubectl get -o yaml`` strings), from the operator and the simulator alike.

Quantities are user input (any pod may ask for ``example.com/foo: "1e1000000"``, which the
API server accepts), so they are read with the API's own grammar, strictly and in constant
time: the text is at most ``MAX_TEXT`` characters, and a value is computed exactly only when
it is small; anything beyond ``MAX_UNITS`` (far beyond any real node) reads as ``MAX_UNITS``,
so it never fits, without ever building the number it spells.

    quantity ::= sign? number suffix?
    number   ::= digits | digits "." digits? | "." digits
    suffix   ::= Ki | Mi | Gi | Ti | Pi | Ei | n | u | m | k | M | G | T | P | E
               | ("e" | "E") sign? digits
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from fabricsched import parsing

MAX_UNITS = 2**63 - 1
"""The largest count a quantity reads as (Kubernetes' own int64 ``Value()`` range); larger
values, and larger negative ones, are clamped to it."""

MAX_TEXT = 64
"""Longest quantity text accepted; the API server writes quantities in a canonical form of a
few characters, and no real manifest comes near this."""

_GRAMMAR = re.compile(
    r"(?P<sign>[+-]?)(?P<whole>[0-9]*)(?:\.(?P<fraction>[0-9]*))?"
    r"(?:[eE](?P<exponent>[+-]?[0-9]+)|(?P<suffix>[KMGTPE]i|[numkMGTPE]))?",
    re.ASCII,
)
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
"""Binary suffixes as powers of two."""
_DECIMAL = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
"""Decimal suffixes as powers of ten."""

_LARGE_DIGITS = 19
"""10**19 > MAX_UNITS: a value with this many integer digits is clamped without computing it."""
_SMALL_DIGITS = -19
"""2**60 < 10**19: a value below 10**-19 before its binary suffix is below 1 after it."""


@dataclass(frozen=True)
class Quantity:
    """``sign x mantissa x 10**exponent x 2**binary``, as written (not yet evaluated)."""

    negative: bool
    mantissa: int
    """The digits without the decimal point and leading zeros (at most ``MAX_TEXT`` of them)."""
    exponent: int
    binary: int = 0

    def ceil(self) -> int:
        """Whole units rounded up, as Kubernetes' ``Value()`` does ("500m" is 1), clamped to
        ``[-MAX_UNITS, MAX_UNITS]``. Constant time: the exact value is built only when it
        has at most a few dozen digits."""
        if self.mantissa == 0:
            return 0
        digits = len(str(self.mantissa)) + self.exponent  # integer digits of mantissa x 10**exponent
        if digits > _LARGE_DIGITS:
            return -MAX_UNITS if self.negative else MAX_UNITS
        if digits < _SMALL_DIGITS:
            return 0 if self.negative else 1  # a tiny positive amount still needs one unit
        numerator: int = self.mantissa * 2**self.binary * 10 ** max(0, self.exponent)
        denominator: int = 10 ** max(0, -self.exponent)
        if self.negative:
            return max(-MAX_UNITS, -(numerator // denominator))
        return min(MAX_UNITS, -(-numerator // denominator))


def parse(quantity: object) -> Quantity:
    """The quantity ``quantity`` spells; raises ``parsing.Invalid`` (a ValueError) for anything
    that is not one, quoting at most a short excerpt of it."""
    if isinstance(quantity, bool) or not isinstance(quantity, str | int | float):
        raise parsing.Invalid(f"not a quantity: {parsing.excerpt(quantity)}")
    if isinstance(quantity, int):
        return Quantity(quantity < 0, min(abs(quantity), MAX_UNITS), 0)
    text = str(quantity) if isinstance(quantity, float) else quantity
    found = _GRAMMAR.fullmatch(text.strip()) if len(text) <= MAX_TEXT else None
    if found is None or not (found["whole"] or found["fraction"]):
        raise parsing.Invalid(f"not a quantity: {parsing.excerpt(text)}")
    fraction = found["fraction"] or ""
    suffix = found["suffix"] or ""
    exponent = int(found["exponent"]) if found["exponent"] is not None else _DECIMAL.get(suffix, 0)
    return Quantity(
        negative=found["sign"] == "-",
        mantissa=int(found["whole"] + fraction or "0"),
        exponent=exponent - len(fraction),
        binary=_BINARY.get(suffix, 0),
    )


def to_int(quantity: object) -> int:
    """Whole units of ``quantity``, rounded up and clamped (``Quantity.ceil``); raises
    ``parsing.Invalid`` (a ValueError) for text that is not a quantity (a broken manifest)."""
    return parse(quantity).ceil()
