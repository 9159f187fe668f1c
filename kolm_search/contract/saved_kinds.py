"""The retriever kinds a saved client names (``SearchClient.save`` / ``SearchClient.load``).

A retriever class that can be saved inside a client registers itself under a kind with
:func:`saved_kind` (the built-in BM25, dense, feedback and composite retrievers do, where they
are defined); ``client.json`` holds the kind, and loading looks the kind up here: it never
imports code named in a file. The contract layer thereby reads saved clients without importing
any concrete retriever.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from kolm_search.errors import KolmValueError

__all__ = ["class_of_kind", "kind_of", "saved_kind"]

T = TypeVar("T", bound=type)

_LOADS: dict[str, type] = {}
_KIND_OF: dict[type, str] = {}


def saved_kind(kind: str, *, loads: bool = True) -> Callable[[T], T]:
    """Class decorator: instances of the class are saved in a client as ``kind``.

    Parameters
    ----------
    kind : str
        The name written in ``client.json``.
    loads : bool, default True
        The class is the one a saved ``kind`` loads as (its ``load(folder)`` or
        ``load(folder, embedder)``). ``False`` for a class saved as another's kind (``Fuse`` is
        saved, and loads back, as a ``CompositeRetriever``).

    Raises
    ------
    KolmValueError
        Another class already loads as ``kind``.
    """
    def register(cls: T) -> T:
        if loads:
            if _LOADS.get(kind, cls) is not cls:
                raise KolmValueError(f"saved kind {kind!r} is already loaded by {_LOADS[kind].__name__}")
            _LOADS[kind] = cls
        _KIND_OF[cls] = kind
        return cls

    return register


def kind_of(retriever: Any) -> str | None:
    """The kind ``retriever`` is saved as (its exact class registered), else ``None``."""
    return _KIND_OF.get(type(retriever))


def class_of_kind(kind: Any) -> type | None:
    """The class a saved ``kind`` loads as, else ``None``."""
    return _LOADS.get(kind) if isinstance(kind, str) else None
