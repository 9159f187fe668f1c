"""Tokenisation for the sparse retrievers: lowercase, Unicode word split, stopwords, stemming.

Defaults follow the common BM25 set-up (and bm25s's defaults, so scores can be compared
token for token): lowercase, tokens of two or more word characters (``(?u)\\b\\w\\w+\\b``),
Lucene's English stop set, Snowball English stemming via PyStemmer. Everything is
configurable and the configuration round-trips through JSON (for saved indexes).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kolm_search.errors import KolmValueError

__all__ = ["ENGLISH_STOPWORDS", "Tokenizer"]

# Lucene's EnglishAnalyzer default stop set (33 words).
ENGLISH_STOPWORDS: frozenset[str] = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their "
    "then there these they this to was will with".split()
)

_DEFAULT_PATTERN = r"(?u)\b\w\w+\b"


@dataclass
class Tokenizer:
    """Text to tokens.

    Parameters
    ----------
    lowercase : bool, default True
    pattern : str, default ``(?u)\\b\\w\\w+\\b``
        Regular expression whose matches are the tokens.
    stopwords : "english", None, or a collection of str
        Tokens removed before stemming (``"english"``: :data:`ENGLISH_STOPWORDS`).
    stemmer : str or None, default "english"
        A Snowball language name for PyStemmer; ``None`` disables stemming.
    """

    lowercase: bool = True
    pattern: str = _DEFAULT_PATTERN
    stopwords: str | Sequence[str] | frozenset[str] | None = "english"
    stemmer: str | None = "english"
    _regex: Any = field(default=None, init=False, repr=False, compare=False)
    _stop: frozenset[str] = field(default=frozenset(), init=False, repr=False, compare=False)
    _stem: Any = field(default=None, init=False, repr=False, compare=False)
    _stem_cache: dict[str, str] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        try:
            self._regex = re.compile(self.pattern)
        except re.error as exc:
            raise KolmValueError(f"Tokenizer pattern {self.pattern!r} is not a valid regex: {exc}") from exc
        if self.stopwords is None:
            self._stop = frozenset()
        elif isinstance(self.stopwords, str):
            if self.stopwords not in ("english", "en"):
                raise KolmValueError(f"unknown stopword list {self.stopwords!r}; use 'english', None or a list")
            self._stop = ENGLISH_STOPWORDS
        else:
            self._stop = frozenset(w.lower() if self.lowercase else w for w in self.stopwords)
        if self.stemmer is not None:
            import Stemmer  # PyStemmer

            try:
                self._stem = Stemmer.Stemmer(self.stemmer)
            except KeyError as exc:
                raise KolmValueError(
                    f"unknown stemmer language {self.stemmer!r}; choose from {Stemmer.algorithms()}"
                ) from exc

    def __call__(self, text: str) -> list[str]:
        """Tokens of one text, in order (repeats kept)."""
        if not isinstance(text, str):
            raise KolmValueError(f"Tokenizer expects str, got {type(text).__name__}")
        if self.lowercase:
            text = text.lower()
        tokens = self._regex.findall(text)
        if self._stop:
            stop = self._stop
            tokens = [t for t in tokens if t not in stop]
        if self._stem is None:
            return tokens
        cache = self._stem_cache
        missing = [t for t in set(tokens) if t not in cache]
        if missing:
            for word, stem in zip(missing, self._stem.stemWords(missing), strict=True):
                cache[word] = stem
        return [cache[t] for t in tokens]

    def many(self, texts: Iterable[str]) -> list[list[str]]:
        """Tokens of many texts."""
        return [self(t) for t in texts]

    def to_config(self) -> dict[str, Any]:
        """JSON-ready configuration (stopwords as a sorted list when custom)."""
        stop: Any = self.stopwords
        if not isinstance(stop, (str, type(None))):
            stop = sorted(self._stop)
        return {"lowercase": self.lowercase, "pattern": self.pattern, "stopwords": stop, "stemmer": self.stemmer}

    def __getstate__(self) -> dict[str, Any]:
        # the compiled stemmer cannot be pickled: travel as configuration, rebuild on arrival
        return self.to_config()

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)  # type: ignore[misc]

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Tokenizer:
        """Inverse of :meth:`to_config`."""
        return cls(**config)
