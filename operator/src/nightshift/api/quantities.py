"""Kubernetes resource quantities ("500m", "1.5Ti", "1e3"): their values, as the API
server reads them. Pure."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

_QUANTITY = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+|Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?$")
_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}


def quantity(text: Any) -> Decimal | None:
    """A Kubernetes quantity's value, or None when the API server would not parse it."""
    if isinstance(text, bool) or not isinstance(text, (int, str)):
        return None
    s = str(text)
    m = _QUANTITY.match(s)
    if not m:
        return None
    suffix = m.group(2) or ""
    number = Decimal(s[: len(s) - len(suffix)])
    if suffix in _BINARY:
        return number * Decimal(1024) ** _BINARY[suffix]
    if suffix[:1] in ("e", "E") and len(suffix) > 1:
        return number.scaleb(int(suffix[1:]))
    return number.scaleb(_DECIMAL[suffix])


def same_quantity(a: Any, b: Any) -> bool:
    """Two strings that are one quantity written two ways ("1.5Ti" and the API server's
    canonical "1536Gi"; "0.5" and "500m"). Plain integers are left to string equality:
    a label "1" and "01" are not one value."""
    if not (isinstance(a, str) and isinstance(b, str)):
        return False
    if a == b:
        return True
    if not any(not part.isdigit() for part in (a, b)):
        return False
    x, y = quantity(a), quantity(b)
    return x is not None and x == y
