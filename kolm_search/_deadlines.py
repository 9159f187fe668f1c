"""Calling a port with a deadline, whether the port is sync or async.

:func:`call_with_deadline` awaits ``fn(*args)`` for at most ``timeout`` seconds and returns
the sentinel :data:`TIMED_OUT` after that (no port can return it, unlike a ``TimeoutError``
it might raise), *abandoning* the call rather than waiting for it:

- a coroutine function is started as a task; on timeout the task is cancelled and left
  behind (not awaited, so a coroutine that ignores cancellation cannot hold the caller);
- any other callable runs on a worker of :data:`DAEMON_POOL`, a small pool of *daemon*
  threads (a hung call can block neither the event loop nor interpreter exit, unlike the
  default executor's threads); on timeout the worker is written off and replaced. A sync
  callable that returns an awaitable has it awaited, within the same deadline.

With ``timeout=None`` the call is made inline exactly as before (no task, no thread).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import os
import queue
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["DAEMON_POOL", "DaemonPool", "TIMED_OUT", "call_with_deadline"]

#: What :func:`call_with_deadline` returns for a call abandoned at its deadline.
TIMED_OUT: Any = type("TimedOut", (), {"__repr__": lambda self: "TIMED_OUT"})()


class _Job:
    __slots__ = ("abandoned", "args", "fn", "future")

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.fn, self.args = fn, args
        self.future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self.abandoned = False


class DaemonPool:
    """A thread pool of daemon threads whose hung workers can be written off.

    Parameters
    ----------
    max_workers : int
        Workers serving jobs at once (others queue).
    max_threads : int
        Cap on all threads, written-off ones included, so a port that never returns
        cannot make the pool grow without bound (jobs then queue and time out).
    idle_seconds : float
        An idle worker exits after this long.
    """

    def __init__(self, max_workers: int = 8, max_threads: int = 64, idle_seconds: float = 30.0) -> None:
        self.max_workers, self.max_threads, self.idle_seconds = max_workers, max_threads, idle_seconds
        self._reset()

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._idle = self._pending = self._workers = self._written_off = 0

    @property
    def threads(self) -> int:
        """Threads alive or starting: serving workers plus written-off ones still running."""
        with self._lock:
            return self._workers + self._written_off

    def submit(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> _Job:
        """Queue ``fn(*args)``; start a worker when none is free (within the caps)."""
        job = _Job(fn, args)
        if self._pid != os.getpid():  # a forked child inherits the counts but not the threads
            self._reset()
        with self._lock:
            self._jobs.put(job)
            self._pending += 1
            if (self._pending > self._idle and self._workers < self.max_workers
                    and self._workers + self._written_off < self.max_threads):
                self._workers += 1
                threading.Thread(target=self._work, name="kolm-port", daemon=True).start()
        return job

    def abandon(self, job: _Job) -> None:
        """Give up on ``job``: drop it if it has not started, else write its worker off."""
        if job.future.cancel():
            return
        with self._lock:
            if not job.future.done() and not job.abandoned:
                job.abandoned = True
                self._workers -= 1
                self._written_off += 1

    def _work(self) -> None:
        while True:
            with self._lock:
                self._idle += 1
            try:
                job = self._jobs.get(timeout=self.idle_seconds)
            except queue.Empty:
                with self._lock:
                    self._idle -= 1
                    if self._jobs.empty():
                        self._workers -= 1
                        return
                continue
            with self._lock:
                self._idle -= 1
                self._pending -= 1
            if not job.future.set_running_or_notify_cancel():
                continue
            try:
                job.future.set_result(job.fn(*job.args))
            except BaseException as exc:
                job.future.set_exception(exc)
            with self._lock:
                if job.abandoned:  # written off while running: this thread leaves the pool
                    self._written_off -= 1
                    return


DAEMON_POOL = DaemonPool()


def _retrieve(fut: asyncio.Future[Any]) -> None:
    """Done-callback on abandoned futures: mark their exception as retrieved (no log noise)."""
    if not fut.cancelled():
        fut.exception()


async def _await_within(awaitable: Any, loop: asyncio.AbstractEventLoop, deadline: float) -> Any:
    task = asyncio.ensure_future(awaitable)
    done, _ = await asyncio.wait({task}, timeout=max(0.0, deadline - loop.time()))
    if not done:
        task.cancel()
        task.add_done_callback(_retrieve)
        return TIMED_OUT
    return task.result()


async def call_with_deadline(fn: Callable[..., Any], args: tuple[Any, ...], timeout: float | None,
                             *, deadline: float | None = None) -> Any:
    """``await fn(*args)`` (or its plain value), abandoned after ``timeout`` seconds.

    Parameters
    ----------
    fn, args
        The port method and its arguments.
    timeout : float or None
        Seconds allowed; ``None`` calls inline with no limit.
    deadline : float, optional
        An absolute ``loop.time()`` to use instead of ``now + timeout`` (a deadline shared
        by the calls of one stage).

    Returns
    -------
    Any
        The call's value, or :data:`TIMED_OUT` when it has not returned by the deadline
        (it is then abandoned, not awaited). What the call raises is raised.
    """
    if timeout is None and deadline is None:
        value = fn(*args)
        return await value if inspect.isawaitable(value) else value
    loop = asyncio.get_running_loop()
    end = deadline if deadline is not None else loop.time() + float(timeout or 0.0)
    if inspect.iscoroutinefunction(fn):
        return await _await_within(fn(*args), loop, end)
    job = DAEMON_POOL.submit(fn, args)
    fut = asyncio.wrap_future(job.future, loop=loop)
    expired: list[bool] = []

    def expire() -> None:
        if not fut.done():
            expired.append(True)
            fut.cancel()  # also drops the job if no worker has started it

    timer = loop.call_later(max(0.0, end - loop.time()), expire)
    try:
        value = await fut
    except asyncio.CancelledError:
        if not expired:
            raise
        DAEMON_POOL.abandon(job)
        return TIMED_OUT
    finally:
        timer.cancel()
    return await _await_within(value, loop, end) if inspect.isawaitable(value) else value
