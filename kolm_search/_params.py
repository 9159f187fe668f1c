"""One vocabulary for checking public arguments (after scikit-learn's ``Interval`` / ``StrOptions``).

Each check returns the value in its canonical type or raises
:class:`~kolm_search.errors.ParameterError` (a ``ValueError`` and a ``TypeError``) naming the
argument, what it must be and the value: ``positive_int("top_k", 0)`` raises "top_k must be a
positive integer, got 0". ``none=True`` also accepts ``None``; booleans are never numbers.
"""

from __future__ import annotations

import enum
import math
import numbers
import reprlib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar

import numpy as np

from kolm_search.errors import ParameterError

__all__ = ["boolean", "integer", "mapping", "non_negative_int", "one_of", "path_exists", "positive_int", "probability",
           "real", "seconds"]

T = TypeVar("T")


def _fail(name: str, what: str, value: Any, none: bool) -> ParameterError:
    return ParameterError(f"{name} must be {what}{' or None' if none else ''}, got {value!r}")


def integer(name: str, value: Any, *, low: int | None = None, high: int | None = None, none: bool = False,
            what: str | None = None) -> Any:
    """``value`` as an ``int`` in ``[low, high]`` (either bound optional); ``what`` names the
    range in the message (default: from the bounds, "an integer >= 1")."""
    if value is None and none:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or \
            (low is not None and int(value) < low) or (high is not None and int(value) > high):
        raise _fail(name, what or (f"an integer in [{low}, {high}]" if low is not None and high is not None else
                                   f"an integer >= {low}" if low is not None else
                                   f"an integer <= {high}" if high is not None else "an integer"), value, none)
    return int(value)


def positive_int(name: str, value: Any, *, none: bool = False) -> Any:
    return integer(name, value, low=1, none=none, what="a positive integer")


def non_negative_int(name: str, value: Any, *, none: bool = False) -> Any:
    return integer(name, value, low=0, none=none, what="a non-negative integer")


def real(name: str, value: Any, *, low: float | None = None, high: float | None = None,
         closed: Literal["both", "left", "right", "neither"] = "both", none: bool = False, finite: bool = True) -> Any:
    """``value`` as a ``float`` in the interval (``closed``: which ends belong); never NaN,
    infinite only with ``finite=False``."""
    if value is None and none:
        return None
    left, right = closed in ("both", "left"), closed in ("both", "right")
    number = "finite number" if finite else "number"
    if low is not None and high is not None:
        what = f"a {number} in {'[' if left else '('}{low:g}, {high:g}{']' if right else ')'}"
    elif low is not None:
        what = f"a positive {number}" if low == 0 and not left else f"a {number} {'>=' if left else '>'} {low:g}"
    else:
        what = f"a {number}" if high is None else f"a {number} {'<=' if right else '<'} {high:g}"
    try:
        x = math.nan if isinstance(value, bool) or not isinstance(value, numbers.Real) else float(value)
    except OverflowError:  # an int beyond float's range (10**400)
        x = math.inf if value > 0 else -math.inf
    if math.isnan(x) or (finite and math.isinf(x)) or (low is not None and (x < low or (x == low and not left))) or \
            (high is not None and (x > high or (x == high and not right))):
        raise _fail(name, what, value, none)
    return x


def probability(name: str, value: Any) -> float:
    result: float = real(name, value, low=0.0, high=1.0)
    return result


def seconds(name: str, value: Any, *, none: bool = True) -> Any:
    """A duration: a positive finite number of seconds (``None``, no limit, by default)."""
    if value is None and none:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 < float(value) < math.inf:
        raise _fail(name, "a positive finite number of seconds", value, none)
    return float(value)


def one_of(name: str, value: T, options: Iterable[Any]) -> T:
    """``value`` itself when it is one of ``options``."""
    allowed = [o.value if isinstance(o, enum.Enum) else o for o in options]
    try:
        ok = value in allowed
    except TypeError:  # incomparable
        ok = False
    if not ok:
        raise ParameterError(f"{name} must be one of {allowed}, got {value!r}")
    return value


def mapping(name: str, value: Any) -> Mapping[Any, Any]:
    if not isinstance(value, Mapping):
        raise ParameterError(f"{name} must be a dict, got {type(value).__name__} {reprlib.repr(value)[:60]}")  # bounded
    return value


def boolean(name: str, value: Any) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise ParameterError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def path_exists(name: str, value: Any, *, kind: Literal["any", "file", "dir"] = "any") -> Path:
    """``value`` (str or path-like) as a ``Path`` that exists (a file or a folder if ``kind`` says
    so); ``name`` says what it is (``"BEIR folder"``)."""
    try:
        path = Path(value)
    except TypeError:
        raise ParameterError(f"{name} must be a path (str or os.PathLike), got {value!r}") from None
    if not path.exists():
        raise ParameterError(f"{name} {str(path)!r} does not exist")
    if (kind == "file" and not path.is_file()) or (kind == "dir" and not path.is_dir()):
        raise ParameterError(f"{name} {str(path)!r} is not a {'file' if kind == 'file' else 'folder'}")
    return path
