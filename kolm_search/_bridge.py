"""The one bridge between sync and async code.

- :func:`run_sync` runs a coroutine to completion from synchronous code, inside or outside a
  running event loop (inside one, on a fresh loop in a worker thread while the caller waits:
  notebooks work). Every blocking shell of an async method (``search_sync``,
  ``search_batch``, ``chat_sync``, ...) is this function.
- :func:`off_loop` awaits a port method from async code without blocking the event loop: a
  coroutine function is awaited, a plain function runs on a worker thread (the loop's default
  executor). Adapters with ``async def`` methods call their sync dependencies through it.
- :func:`call_with_deadline` awaits ``fn(*args)`` for at most ``timeout`` seconds and returns
  a :class:`TimedOut` (:data:`TIMED_OUT`) after that (no port can return it, unlike a ``TimeoutError``
  it might raise), *abandoning* the call rather than waiting for it:

  - a coroutine function is started as a task; on timeout the task is cancelled and left
    behind (not awaited, so a coroutine that ignores cancellation cannot hold the caller);
  - any other callable runs on a worker of :data:`DAEMON_POOL`, a small pool of *daemon*
    threads (a hung call can block neither the event loop nor interpreter exit, unlike the
    default executor's threads); on timeout the worker is written off and replaced. A sync
    callable that returns an awaitable has it awaited, within the same deadline.

  With ``timeout=None`` the call is made inline exactly as before (no task, no thread).
- :func:`resolve` awaits a value if it is awaitable (ports may be written either way).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import inspect
import os
import queue
import threading
import weakref
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["DAEMON_POOL", "DaemonPool", "TIMED_OUT", "TimedOut", "call_with_deadline", "inline", "off_loop",
           "resolve", "run_sync"]

T = TypeVar("T")

class TimedOut:
    """What :func:`call_with_deadline` returns for a call abandoned at its deadline (test with
    ``isinstance``): :data:`TIMED_OUT`, or, for a call that never started, one whose
    :attr:`note` says why (the daemon pool's threads all busy or held by hung calls).

    Attributes
    ----------
    note : str
        ``""``, or a parenthesised clause, with its leading space, for the end of a message.
    """

    __slots__ = ("note",)

    def __init__(self, note: str = "") -> None:
        self.note = note

    def __repr__(self) -> str:
        return "TIMED_OUT" if not self.note else f"TimedOut({self.note!r})"


#: What :func:`call_with_deadline` returns for a call abandoned at its deadline after it started.
TIMED_OUT = TimedOut()


class _Job:
    __slots__ = ("abandoned", "args", "context", "fn", "future", "queued")

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.fn, self.args = fn, args
        self.context = contextvars.copy_context()  # the caller's context variables, as asyncio.to_thread
        self.future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self.abandoned = False
        self.queued = False  # no worker was free for it when submitted, and none could start


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
            if self._pending > self._idle:
                if self._workers < self.max_workers and self._workers + self._written_off < self.max_threads:
                    self._workers += 1
                    threading.Thread(target=self._work, name="kolm-port", daemon=True).start()
                else:
                    job.queued = True
        return job

    def abandon(self, job: _Job) -> bool:
        """Give up on ``job``: drop it if it has not started, else write its worker off.
        Returns whether it had started."""
        if job.future.cancel():
            return False
        with self._lock:
            if not job.future.done() and not job.abandoned:
                job.abandoned = True
                self._workers -= 1
                self._written_off += 1
        return True

    def why_queued(self, job: _Job) -> str:
        """Why ``job``, dropped at its deadline, never started (a clause for the end of a
        timeout's message): the workers serving and the threads written off, against the caps,
        when no worker was free for it nor could start; else its deadline came before a worker
        (free or just started) took it up."""
        if not job.queued:
            return " (it never started: its deadline passed before a port worker took it up)"
        with self._lock:
            workers, written_off = self._workers, self._written_off
        return (f" (it never started: {workers} of kolm_search's {self.max_workers} port workers were busy and "
                f"{written_off} threads were held by calls abandoned at earlier deadlines, of at most "
                f"{self.max_threads} threads; a call that hangs holds its thread until it returns)")

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
                job.future.set_result(job.context.run(job.fn, *job.args))
            except BaseException as exc:
                job.future.set_exception(exc)
            with self._lock:
                if job.abandoned:  # written off while running: this thread leaves the pool
                    self._written_off -= 1
                    return


DAEMON_POOL = DaemonPool()


#: Tasks cancelled at their deadline and left behind: :func:`_run` gives them only
#: :data:`_GRACE` seconds to end when it closes their loop (one ignoring its cancellation
#: cannot hold the caller).
_ABANDONED: weakref.WeakSet[asyncio.Future[Any]] = weakref.WeakSet()
_GRACE = 1.0


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
        _ABANDONED.add(task)
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
        The call's value, or a :class:`TimedOut` when it has not returned by the deadline
        (it is then abandoned, not awaited): :data:`TIMED_OUT`, or one with a note when the call
        never started. What the call raises is raised.
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
        return TIMED_OUT if DAEMON_POOL.abandon(job) else TimedOut(DAEMON_POOL.why_queued(job))
    finally:
        timer.cancel()
    return await _await_within(value, loop, end) if inspect.isawaitable(value) else value


async def resolve(value: Any) -> Any:
    """Await ``value`` if it is awaitable, else return it."""
    if inspect.isawaitable(value):
        return await value
    return value


async def inline(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``, called in this thread and awaited if it returns an awaitable (for code
    that blocks its caller anyway: a sync shell, a worker thread)."""
    return await resolve(fn(*args))


async def off_loop(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` without blocking the running loop: awaited when ``fn`` is a coroutine
    function, else run on a worker thread (the loop's default executor; an awaitable it
    returns is awaited here)."""
    if inspect.iscoroutinefunction(fn):
        return await fn(*args)
    return await resolve(await asyncio.to_thread(fn, *args))


def _run(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on a new event loop in this thread. Unlike :func:`asyncio.run`, closing the
    loop does not wait for executor threads still running a call that a deadline gave up on
    (a hung name lookup, a port that never returns), nor, past :data:`_GRACE` seconds, for a
    task abandoned at its deadline that ignores its cancellation."""
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coro)
    finally:
        try:
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            left = {t for t in pending if t in _ABANDONED}
            if pending - left:
                loop.run_until_complete(asyncio.gather(*(pending - left), return_exceptions=True))
            if left:
                loop.run_until_complete(asyncio.wait(left, timeout=_GRACE))
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion from synchronous code and return its result.

    Outside a running event loop the coroutine runs on a new loop in this thread. Inside one
    (a Jupyter kernel, an ``async def`` that calls a blocking API) it runs on a new loop in a
    worker thread while the caller blocks, so the blocking shells work from notebooks; async
    ports then run on that worker loop, not on the caller's (an ``await`` of the async method
    is the better call there).
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return _run(coro)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="kolm-sync") as pool:
        return pool.submit(contextvars.copy_context().run, _run, coro).result()  # context variables follow
