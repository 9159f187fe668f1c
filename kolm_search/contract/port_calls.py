"""Calling ports and checking what they return, for the layers that use them (the stage
runner, retrievers, adapters, jobs):

- :func:`embed_all` is the one way an embedder (:class:`~kolm_search.contract.ports.Embedder`)
  is called for many texts, and :func:`embedding_matrix` checks what it returns (a float32
  matrix of one row per text, every value finite);
- :func:`fingerprint_of` asks a stage for what produced its output
  (:class:`~kolm_search.contract.ports.Fingerprinted`), checked.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from kolm_search._bridge import off_loop
from kolm_search.contract.ports import Embedder, EmbedsMany, Fingerprinted, implements
from kolm_search.errors import KolmTypeError, KolmValueError

__all__ = ["embed_all", "embedding_matrix", "fingerprint_of"]


def embedding_matrix(value: Any, n_expected: int, *, what: str,
                     invalid: Callable[[str], Exception] = KolmValueError) -> npt.NDArray[np.float32]:
    """Check an embedder's output and return it as float32 of shape ``(n_expected, d)``.

    A 1-D vector is accepted when ``n_expected == 1``. Raises ``invalid(message)`` (the method
    ``what`` named) on a count mismatch, ragged or empty rows, or NaN/inf values.
    """
    try:
        mat = np.asarray(value, dtype=np.float32)
    except (ValueError, TypeError) as exc:
        raise invalid(f"{what} returned rows of different dimensions or non-numbers: {exc}") from exc
    if mat.ndim == 1 and n_expected == 1:
        mat = mat[None, :]
    if mat.ndim != 2:
        raise invalid(f"{what} must return a (n, d) matrix, got shape {mat.shape}")
    if mat.shape[0] != n_expected:
        raise invalid(f"{what} returned {mat.shape[0]} embeddings for {n_expected} inputs")
    if mat.shape[1] == 0:
        raise invalid(f"{what} returned empty vectors")
    if not np.all(np.isfinite(mat)):
        raise invalid(f"{what} returned NaN or infinite values")
    return mat


async def embed_all(embedder: Embedder, texts: Sequence[str], *,
                    call: Callable[..., Awaitable[Any]] = off_loop,
                    invalid: Callable[[str], Exception] = KolmValueError) -> npt.NDArray[np.float32]:
    """Embeddings of ``texts``, float32 (n, d), checked (:func:`embedding_matrix`).

    One ``embed_many`` call when the embedder is :class:`EmbedsMany`, else one ``embed`` call
    per text, concurrently. ``call(fn, *args)`` makes each port call: by default
    :func:`~kolm_search._bridge.off_loop` (a sync method runs on a worker thread, so an async
    caller never blocks its event loop); the stage runner passes its deadline-bounded call.
    No texts: a (0, 0) matrix and no call.
    """
    texts = list(texts)
    if not texts:
        return np.zeros((0, 0), np.float32)
    if implements(embedder, EmbedsMany):
        return embedding_matrix(await call(embedder.embed_many, texts), len(texts), what="embed_many", invalid=invalid)
    vectors = await asyncio.gather(*(call(embedder.embed, t) for t in texts))
    return embedding_matrix([embedding_matrix(v, 1, what="embed", invalid=invalid)[0] for v in vectors], len(texts),
                            what="embed", invalid=invalid)


def fingerprint_of(stage: Any, explicit: str | None = None, *, what: str = "reranker") -> str:
    """What produced an output, for a job's manifest or a cache key: ``explicit`` when given,
    else the stage's own ``fingerprint()`` (:class:`Fingerprinted`).

    Raises
    ------
    KolmTypeError
        The stage declares no fingerprint and none is given (nothing is guessed from its
        class or attributes), or a fingerprint is not a non-empty string.
    """
    if explicit is not None:
        if not isinstance(explicit, str) or not explicit.strip():
            raise KolmTypeError(f"fingerprint must be a non-empty string naming the {what} and its version, "
                                f"got {explicit!r}")
        return explicit
    if not implements(stage, Fingerprinted):
        raise KolmTypeError(f"the {what} {type(stage).__name__} declares no fingerprint() (the Fingerprinted "
                            f"capability of kolm_search.contract.ports), so what produced this output cannot be recorded: "
                            f"pass fingerprint='...' naming the model, its version and parameters")
    found = stage.fingerprint()
    if not isinstance(found, str) or not found.strip():
        raise KolmTypeError(f"{type(stage).__name__}.fingerprint() must return a non-empty string, got {found!r}")
    return found
