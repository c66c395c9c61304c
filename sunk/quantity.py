"""Kubernetes resource quantities ("500m", "128Gi"), held exactly.

Shared by the policy engine (the CEL ``quantity()`` library) and by translation (a Pod's
requests become a job's CPUs, memory and GPUs), so both read a quantity the same way.
"""

from __future__ import annotations

import re
from fractions import Fraction

# Kubernetes' quantity grammar: a signed decimal number and an optional suffix, which is a
# binary SI suffix, a decimal exponent (e3, E-2) or a decimal SI suffix. The exponent is tried
# before the bare "E" (exa) so that "1E3" is a thousand and "1E" is an exa.
_QUANTITY = re.compile(
    r"(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?:(?P<binary>Ki|Mi|Gi|Ti|Pi|Ei)|[eE](?P<exponent>[+-]?[0-9]+)|(?P<decimal>[numkMGTPE]))?"
)
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
# Far beyond any real resource, and small enough that the exact arithmetic stays cheap.
_MAX_EXPONENT = 100
_MAX_QUANTITY_LENGTH = 128

class Quantity:
    """A Kubernetes resource quantity ("128Gi", "500m"), held as an exact fraction.

    Exact arithmetic is what Kubernetes does too: "0.1" + "0.2" must equal "300m".
    """

    __slots__ = ("value",)

    def __init__(self, value: Fraction) -> None:
        self.value = value

    @classmethod
    def parse(cls, text: str) -> Quantity:
        """Parse Kubernetes' quantity syntax; ValueError says why a text is not a quantity."""
        if len(text) > _MAX_QUANTITY_LENGTH:
            raise ValueError(f"quantity longer than {_MAX_QUANTITY_LENGTH} characters")
        match = _QUANTITY.fullmatch(text)
        if match is None:
            raise ValueError(f"invalid quantity {text!r}")
        number = Fraction(match["number"])
        if match["binary"]:
            return cls(number * _BINARY[match["binary"]])
        exponent = _DECIMAL[match["decimal"]] if match["decimal"] else 0
        if match["exponent"]:
            exponent = int(match["exponent"])
            if abs(exponent) > _MAX_EXPONENT:
                raise ValueError(f"quantity exponent out of range in {text!r}")
        return cls(number * Fraction(10) ** exponent)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Quantity) and self.value == other.value

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __lt__(self, other: Quantity) -> bool:
        return self.value < _quantity_operand(other).value

    def __le__(self, other: Quantity) -> bool:
        return self.value <= _quantity_operand(other).value

    def __gt__(self, other: Quantity) -> bool:
        return self.value > _quantity_operand(other).value

    def __ge__(self, other: Quantity) -> bool:
        return self.value >= _quantity_operand(other).value

    def __hash__(self) -> int:
        return hash(self.value)

    def __repr__(self) -> str:
        return f"Quantity({self})"

    def __str__(self) -> str:
        if self.value.denominator == 1:
            return str(self.value.numerator)
        return str(float(self.value))


def _quantity_operand(other: object) -> Quantity:
    if not isinstance(other, Quantity):
        raise TypeError(f"no such overload: quantity compared with {type(other).__name__}")
    return other


