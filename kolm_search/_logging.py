"""Reporting to a ``Logger`` port: warnings that never fail the caller."""

from __future__ import annotations

import logging
import warnings
from typing import Any

__all__ = ["log", "warn"]

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "warn": logging.WARNING,
           "error": logging.ERROR}


def log(logger: Any, level: str, message: str, payload: Any = None) -> None:
    """Send ``message`` (and ``payload``) to a ``Logger`` port; a ``None`` logger is a no-op.

    Stdlib loggers get the payload as ``extra={"payload": ...}`` (and ``exc_info`` when it is
    an exception); console-like loggers get it as a second argument. Never raises: a logger
    that fails (any method, any exception) is bypassed and the message goes to the
    ``kolm_search`` stdlib logger instead, so reporting a problem cannot fail a search.
    """
    if logger is None:
        return
    try:
        _emit(logger, level, message, payload)
    except Exception as exc:  # a broken logger must never fail the caller
        try:
            fallback = logging.getLogger("kolm_search")
            fallback.log(_LEVELS.get(level, logging.WARNING), "%s (%r); the configured logger failed: %s: %s",
                         message, payload, type(exc).__name__, exc)
        except Exception:
            pass


def _emit(logger: Any, level: str, message: str, payload: Any) -> None:
    if isinstance(logger, (logging.Logger, logging.LoggerAdapter)):
        exc = payload if isinstance(payload, BaseException) else None
        text = message if payload is None else f"{message} ({payload})"
        getattr(logger, level)(text, extra={"payload": payload}, exc_info=exc)
        return
    method = getattr(logger, level, None)
    if method is None and level == "warning":
        method = getattr(logger, "warn", None)
    if method is None:
        return
    if payload is None:
        method(message)
    else:
        method(message, payload)


def warn(logger: Any, message: str, payload: Any = None) -> None:
    """A warning to ``logger``, or (when it is ``None``) a ``RuntimeWarning``; never raises
    (not even under ``-W error``)."""
    if logger is not None:
        log(logger, "warning", message, payload)
        return
    try:
        warnings.warn(message if payload is None else f"{message} ({payload})", RuntimeWarning, stacklevel=3)
    except Exception:
        pass
