"""Read-only views: an array the library keeps and hands out again (a table's ids, a coded run's
codes and scores, a stored table's per-query values) is given as a view that refuses writes, so
that a caller's write cannot change what later calls see; the array itself is left as it is."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["read_only_view"]


def read_only_view(values: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """A view of ``values`` (same shape, dtype and memory) whose ``flags.writeable`` is False;
    ``values`` keeps its own flags. An array already read-only is returned as it is (so that a
    frame made from another's arrays keeps their identity, which the lookups that reuse a
    column by identity first compare)."""
    values = np.asarray(values)
    if not values.flags.writeable:
        return values
    view = values.view()
    view.flags.writeable = False
    return view
