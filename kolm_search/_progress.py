"""Progress bars on stderr for every phase that can take more than a moment: one look, one switch.

:func:`progress_bar` is a ``tqdm`` bar showing items per second and the time left; it appears
only once its phase has run for :data:`DELAY` seconds (so quick calls print nothing) and counts
from the first item (a corpus being embedded shows its rate after the first batch). Whether
bars show is decided by the caller's ``progress`` argument when it gives one, else by the
innermost :func:`progress_scope` (a context variable: a job's ``progress=False`` silences the
models it calls, on worker threads too), else shown.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

__all__ = ["DELAY", "MININTERVAL", "progress_bar", "progress_enabled", "progress_scope"]

#: Seconds a phase runs before its bar appears.
DELAY = 1.0
#: Least seconds between two redraws of a bar (tqdm's ``mininterval``).
MININTERVAL = 0.1
_ENABLED: ContextVar[bool] = ContextVar("kolm_search_progress", default=True)


@contextmanager
def progress_scope(enabled: bool) -> Iterator[None]:
    """Within the block, bars whose caller gives no ``progress`` follow ``enabled``."""
    token = _ENABLED.set(bool(enabled))
    try:
        yield
    finally:
        _ENABLED.reset(token)


def progress_enabled(progress: bool | None = None) -> bool:
    """``progress`` when given, else the innermost :func:`progress_scope`'s setting (default on)."""
    return _ENABLED.get() if progress is None else bool(progress)


def progress_bar(total: int | None, desc: str, unit: str, *, progress: bool | None = None, initial: int = 0) -> Any:
    """A ``tqdm`` bar on stderr (``update(n)``, ``close()``, or use it as a context manager).

    Parameters
    ----------
    total : int or None
        Items the phase will process (None: not known, a stream).
    desc, unit : str
        ``"embed"``, ``"text"``: shown as ``embed: 40%|... | 512/1280 [00:12<00:18, 41.2text/s]``.
    progress : bool, optional
        Show it (``None``: see :func:`progress_enabled`).
    initial : int
        Items already done (a resumed job).
    """
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, desc=desc, unit=unit, disable=not progress_enabled(progress),
                leave=False, delay=DELAY, mininterval=MININTERVAL, file=sys.stderr, dynamic_ncols=True, smoothing=0.1)
