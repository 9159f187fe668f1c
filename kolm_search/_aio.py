"""Small helpers shared by the async core: awaiting maybe-awaitables, logging, sync shells."""

from __future__ import annotations

import asyncio
import inspect
import logging
import warnings
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["embed_batch", "log", "resolve", "run_blocking", "run_sync", "warn"]

T = TypeVar("T")
_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "warn": logging.WARNING,
           "error": logging.ERROR}


async def resolve(value: Any) -> Any:
    """Await ``value`` if it is awaitable, else return it."""
    if inspect.isawaitable(value):
        return await value
    return value


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


def run_sync(coro: Coroutine[Any, Any, T], *, name: str) -> T:
    """Run ``coro`` to completion from synchronous code.

    Raises ``RuntimeError`` (closing the coroutine) when called inside a running event loop.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    coro.close()
    raise RuntimeError(
        f"{name}_sync() was called inside a running event loop; use `await {name}(...)` instead"
    )


def run_blocking(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion and return its result, even inside a running event loop.

    Outside a loop this is ``asyncio.run``. Inside one (a Jupyter kernel, say) the coroutine
    runs on a fresh loop in a worker thread while the caller blocks, so batch jobs work from
    notebooks. Async ports then run on that worker loop, not on the caller's.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="kolm-batch") as pool:
        return pool.submit(asyncio.run, coro).result()


async def embed_batch(embedder: Any, texts: list[str]) -> Any:
    """float32 (n, d) embeddings of ``texts``: ``embed_many`` when the embedder has it, else
    ``embed`` for each text (awaiting what is awaitable)."""
    import numpy as np

    many = getattr(embedder, "embed_many", None)
    if callable(many):
        return np.asarray(await resolve(many(texts)), dtype=np.float32).reshape(len(texts), -1)
    rows = [np.asarray(await resolve(embedder.embed(t)), dtype=np.float32) for t in texts]
    return np.stack(rows) if rows else np.zeros((0, 0), np.float32)
