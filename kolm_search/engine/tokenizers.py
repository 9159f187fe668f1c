"""Tokenizers in saved indexes: which ones a manifest can rebuild, and how.

A plain :class:`~kolm_search.engine.text.Tokenizer` is saved as its configuration. Any other tokenizer
(a subclass, a callable) is saved only as an instance of a class registered with
:func:`register_tokenizer` under a name (the class implements ``to_config`` and
``from_config``); otherwise ``save`` refuses it, naming its class, before writing anything
(:func:`tokenizer_config`). Loading looks the name up among the registered classes: it never
imports code named in a file.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from kolm_search.engine.text import Tokenizer
from kolm_search.errors import KolmTypeError, KolmValueError

__all__ = ["register_tokenizer", "restore_tokenizer", "tokenizer_config"]

_REGISTERED: dict[str, type] = {}
_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,100}")
_SAMPLE = 32  # texts tokenised before and after the round trip by tokenizer_config


def register_tokenizer(name: str, cls: type) -> type:
    """Let indexes save and load tokenizers of class ``cls`` under ``name``.

    Parameters
    ----------
    name : str
        Written in the manifest (1-100 characters of letters, digits and ``_.:-``). Register the
        same name with the same class in every process that loads such an index, before
        ``load``.
    cls : type
        A callable class (``str -> list of str``) implementing ``to_config(self) -> dict``
        (JSON values) and the classmethod ``from_config(config) -> instance``. A
        :class:`Tokenizer` subclass inherits both; one with fields or state of its own
        extends ``to_config`` with them.

    Returns
    -------
    type
        ``cls`` (usable as ``register_tokenizer("synonyms", Synonyms)`` after the class).

    Raises
    ------
    KolmValueError
        A bad name, or a name already registered for another class.
    KolmTypeError
        ``cls`` is not a class with ``to_config`` and ``from_config``.
    """
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise KolmValueError(f"tokenizer name must be 1-100 characters of letters, digits and '_.:-', got {name!r}")
    if not isinstance(cls, type) or not callable(getattr(cls, "to_config", None)) \
            or not callable(getattr(cls, "from_config", None)):
        raise KolmTypeError(f"register_tokenizer({name!r}, ...) needs a class with to_config and from_config, "
                            f"got {cls!r}")
    if cls is Tokenizer:
        raise KolmValueError("Tokenizer itself is saved by its configuration; register subclasses and other classes")
    if _REGISTERED.get(name, cls) is not cls:
        raise KolmValueError(f"tokenizer name {name!r} is already registered for {_REGISTERED[name].__qualname__}")
    _REGISTERED[name] = cls
    return cls


def tokenizer_config(tokenizer: Any, sample: Sequence[str] = ()) -> dict[str, Any]:
    """The manifest entry of ``tokenizer``, checked to restore as the same tokenizer.

    A plain :class:`Tokenizer` is its :meth:`~Tokenizer.to_config`; an instance of a class
    registered with :func:`register_tokenizer` is ``{"registered": name, "config": ...}``.
    The entry is passed through JSON and restored, and the restored tokenizer must give the
    configuration back and tokenise the first 32 texts of ``sample`` alike.

    Raises
    ------
    KolmTypeError
        Another tokenizer (an unregistered subclass, a function such as ``str.split``): it
        could not be rebuilt on load; the message names its class.
    KolmValueError
        A configuration that is not JSON, or a tokenizer that does not survive the round trip.
    """
    cls = type(tokenizer)
    name = next((n for n, c in _REGISTERED.items() if c is cls), None)
    own_name = getattr(tokenizer, "__qualname__", None)  # a function's or method's, for the message
    what = (f"tokenizer {own_name} (a {cls.__name__})" if isinstance(own_name, str)
            else f"tokenizer of class {cls.__module__}.{cls.__qualname__}")
    if cls is not Tokenizer and name is None:
        raise KolmTypeError(f"{what} cannot be saved: a loaded index could not rebuild it. Use a Tokenizer, or an "
                            "instance of a class registered with kolm_search.register_tokenizer(name, cls) "
                            "(implementing to_config and from_config)")
    try:
        own = tokenizer.to_config()
        entry = own if name is None else {"registered": name, "config": own}
        text = json.dumps(entry, allow_nan=False, ensure_ascii=False)
    except Exception as exc:
        raise KolmValueError(f"{what}: to_config() did not give JSON values: {type(exc).__name__}: {exc}") from exc
    entry = json.loads(text)
    restored = restore_tokenizer(entry)
    again = restored.to_config() if name is None else {"registered": name, "config": restored.to_config()}
    if json.loads(json.dumps(again, allow_nan=False, ensure_ascii=False)) != entry:
        raise KolmValueError(f"{what}: from_config(to_config()) gives another configuration ({again!r} from {entry!r})")
    for row, text_ in enumerate(list(sample)[:_SAMPLE]):
        before, after = list(tokenizer(text_)), list(restored(text_))
        if before != after:
            raise KolmValueError(f"{what} does not survive a round trip through its configuration: document row "
                                 f"{row} tokenises as {before[:8]!r} before and {after[:8]!r} after (to_config must "
                                 "hold everything its __call__ uses)")
    return entry


def restore_tokenizer(entry: dict[str, Any]) -> Any:
    """The tokenizer of a manifest entry written by :func:`tokenizer_config`.

    Raises
    ------
    KolmValueError
        An unregistered name, or a configuration its class refuses (message without the file;
        the loader adds it).
    """
    if "registered" not in entry:
        return Tokenizer.from_config(entry)
    name = entry["registered"]
    cls = _REGISTERED.get(name) if isinstance(name, str) else None
    if cls is None:
        known = ", ".join(sorted(_REGISTERED)) or "none"
        raise KolmValueError(f"tokenizer {name!r} is not registered in this process (registered: {known}); call "
                             f"kolm_search.register_tokenizer({name!r}, TheClass) before loading")
    try:
        return cls.from_config(entry["config"])  # type: ignore[attr-defined]
    except KolmValueError:
        raise
    except Exception as exc:
        raise KolmValueError(f"tokenizer {name!r} ({cls.__qualname__}): from_config failed: "
                             f"{type(exc).__name__}: {exc}") from exc
