"""Tokenisation for the sparse retrievers: lowercase, Unicode word split, stopwords, stemming.

Defaults follow the common BM25 set-up (and bm25s's defaults, so scores can be compared
token for token): lowercase, tokens of two or more word characters (``(?u)\\b\\w\\w+\\b``),
Lucene's English stop set, Snowball English stemming via PyStemmer. ``language=`` switches
stopwords and stemmer together to any Snowball language (:mod:`kolm_search.engine.languages`); runs
of Chinese, Japanese or Korean characters always become character bigrams. Everything is
configurable and the configuration round-trips through JSON (for saved indexes).

A saved index must be able to rebuild its tokenizer: :mod:`kolm_search.engine.tokenizers` says which
tokenizers can be saved (a plain :class:`Tokenizer`, or a registered class).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields
from functools import cache
from typing import Any

import numpy as np
import numpy.typing as npt

from kolm_search._params import boolean
from kolm_search.engine.languages import (
    ENGLISH_STOPWORDS,
    cjk_tokens,
    fold_width,
    has_cjk,
    normalize_language,
    stopwords_for,
)
from kolm_search.errors import KolmTypeError, KolmValueError

__all__ = ["ENGLISH_STOPWORDS", "Tokenizer"]

_DEFAULT_PATTERN = r"(?u)\b\w\w+\b"
# Lowercasing as Lucene's LowerCaseFilter (Unicode's simple case mapping, one code point to
# one): Python's full mapping turns U+0130 (İ) into "i" + U+0307, a combining mark that split
# "İstanbul" into "i" and "stanbul". U+0130 is the only character whose full lowercase form
# adds a mark (tests/test_languages.py enumerates them all).
_SIMPLE_LOWER = str.maketrans({"\u0130": "i"})


def _lower(text: str) -> str:
    return text.translate(_SIMPLE_LOWER).lower() if "\u0130" in text else text.lower()


@cache
def _mark_class() -> str:
    """Ranges of every combining mark (categories Mn, Mc, Me) for a regex character class.

    Python's ``\\w`` leaves them out, so the default pattern cut words of the scripts that
    write vowels and viramas as marks (Devanagari, Tamil, Hebrew points ...) into pieces."""
    codes = [cp for cp in [*range(0x20000), *range(0xE0100, 0xE01F0)] if unicodedata.category(chr(cp))[0] == "M"]
    ranges: list[list[int]] = []
    for cp in codes:
        if ranges and cp == ranges[-1][1] + 1:
            ranges[-1][1] = cp
        else:
            ranges.append([cp, cp])
    return "".join(f"\\U{a:08x}-\\U{b:08x}" for a, b in ranges)


@cache
def _marked_words() -> tuple[re.Pattern[str], re.Pattern[str]]:
    """The default pattern with combining marks as word characters (two or more characters of
    ``\\w`` or marks, a maximal run), and a search for a mark."""
    w = f"[\\w{_mark_class()}]"
    return re.compile(f"(?<!{w}){w}{w}+(?!{w})"), re.compile(f"[{_mark_class()}]")


@dataclass
class Tokenizer:
    """Text to tokens.

    Parameters
    ----------
    lowercase : bool, default True
    pattern : str, default ``(?u)\\b\\w\\w+\\b``
        Regular expression whose whole matches are the tokens (outside runs of CJK characters,
        which become overlapping character bigrams, as Lucene's ``CJKAnalyzer`` makes them);
        empty matches are dropped. A pattern with capturing groups is refused (``findall``
        would return the groups): write groups as ``(?:...)``. The default counts combining
        marks as word characters (Hindi's vowel signs and viramas, Hebrew points ...), which
        Python's ``\\w`` does not.
    stopwords : "auto", a language, None, or a collection of str
        Words removed before stemming. ``"auto"``: the list of ``language``; a language name
        or code (``"english"``, ``"fr"``): that language's list; ``None``: none. Each entry is
        analysed as documents are (width folding, lowercasing, the pattern): an entry that
        becomes one word removes that word; one that becomes several (French ``celle-ci``,
        Indonesian ``seolah-olah``) removes those words where they follow each other.
    stemmer : "auto", a language, or None
        A Snowball language for PyStemmer; ``"auto"``: ``language``'s stemmer (none for CJK);
        ``None`` disables stemming.
    language : str, default "english"
        Any Snowball language of PyStemmer by name or ISO 639-1 code, or ``"cjk"``
        (``"zh"``, ``"ja"``, ``"ko"``). Recorded in saved indexes.

    Examples
    --------
    >>> Tokenizer(language="fr")("Les chercheurs cherchaient des réponses")
    ['chercheur', 'cherch', 'répons']
    >>> Tokenizer(language="ja")("東京タワーに行く")
    ['東京', '京タ', 'タワ', 'ワー', 'ーに', 'に行', '行く']
    """

    lowercase: bool = True
    pattern: str = _DEFAULT_PATTERN
    stopwords: str | Sequence[str] | frozenset[str] | None = "auto"
    stemmer: str | None = "auto"
    language: str = "english"
    _regex: Any = field(default=None, init=False, repr=False, compare=False)
    _entries: frozenset[str] = field(default=frozenset(), init=False, repr=False, compare=False)
    _stop: frozenset[str] = field(default=frozenset(), init=False, repr=False, compare=False)
    _phrases: dict[str, tuple[tuple[str, ...], ...]] = field(default_factory=dict, init=False, repr=False,
                                                              compare=False)
    _stem: Any = field(default=None, init=False, repr=False, compare=False)
    _stem_name: str | None = field(default=None, init=False, repr=False, compare=False)
    _stem_cache: dict[str, str] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.lowercase = boolean("Tokenizer lowercase", self.lowercase)
        self.language = normalize_language(self.language)
        try:
            self._regex = re.compile(self.pattern)
        except (re.error, TypeError) as exc:
            raise KolmValueError(f"Tokenizer pattern {self.pattern!r} is not a valid regex: {exc}") from exc
        if self._regex.groups:
            raise KolmValueError(f"Tokenizer pattern {self.pattern!r} has {self._regex.groups} capturing group(s): "
                                 "its tokens would be the groups' tuples, not the whole matches; "
                                 "write groups as (?:...)")
        if self.stopwords is None:
            self._entries = frozenset()
        elif isinstance(self.stopwords, str):
            name = self.language if self.stopwords == "auto" else self.stopwords
            try:
                self._entries = stopwords_for(name)
            except KolmValueError as exc:
                raise KolmValueError(f"unknown stopword list {self.stopwords!r}: {exc}; "
                                     "use 'auto', a language, None or a list of words") from exc
        else:
            if not all(isinstance(w, str) for w in self.stopwords):
                raise KolmTypeError("Tokenizer stopwords must be str, got "
                                    f"{next(type(w).__name__ for w in self.stopwords if not isinstance(w, str))}")
            self._entries = frozenset(_lower(fold_width(w)) if self.lowercase else fold_width(w) for w in self.stopwords)
        self._analyse_stopwords()
        stemmer = self.stemmer
        if stemmer == "auto":
            stemmer = None if self.language == "cjk" else self.language
        if stemmer is not None:
            import Stemmer  # PyStemmer

            try:
                self._stem_name = normalize_language(stemmer)
                self._stem = Stemmer.Stemmer(self._stem_name)
            except (KeyError, KolmValueError) as exc:
                raise KolmValueError(
                    f"unknown stemmer language {stemmer!r}; choose from {Stemmer.algorithms()}"
                ) from exc

    def _analyse_stopwords(self) -> None:
        """Stopword entries as documents are analysed: single words and phrases of words."""
        single: set[str] = set()
        phrases: dict[str, set[tuple[str, ...]]] = {}
        for entry in self._entries:
            ws = self.words(entry)
            if len(ws) == 1:
                single.add(ws[0])
            elif ws:
                phrases.setdefault(ws[0], set()).add(tuple(ws))
        self._stop = frozenset(single)
        self._phrases = {w: tuple(sorted(ps, key=lambda p: (-len(p), p))) for w, ps in phrases.items()}

    def drop_phrases(self, words: list[str]) -> list[str]:
        """``words`` without the stopword entries of several words where they follow each other
        (longest first); ``words`` itself when there are none."""
        phrases = self._phrases
        if not phrases or phrases.keys().isdisjoint(words):
            return words
        out: list[str] = []
        i, n = 0, len(words)
        while i < n:
            for p in phrases.get(words[i], ()):
                if tuple(words[i:i + len(p)]) == p:
                    i += len(p)
                    break
            else:
                out.append(words[i])
                i += 1
        return out

    def __call__(self, text: str) -> list[str]:
        """Tokens of one text, in order (repeats kept)."""
        tokens = self.drop_phrases(self.words(text))
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
        out = [cache[t] for t in tokens]
        return [t for t in out if t] if "" in out else out  # a stem of nothing is no token

    def words(self, text: str) -> list[str]:
        """The words of one text before stopwords and stemming (lowercased, CJK bigrams).

        ``tokenizer(text)`` equals ``[tokenizer.term(w) for w in tokenizer.drop_phrases(
        tokenizer.words(text))]`` without the ``None``s: each word becomes its token alone, so a
        corpus can map each distinct word once
        (:meth:`kolm_search.retrievers.postings.Postings.from_texts`).
        """
        if not isinstance(text, str):
            raise KolmValueError(f"Tokenizer expects str, got {type(text).__name__}")
        regex = self._regex
        if text.isascii():  # no width folding, combining mark or CJK run possible
            words = regex.findall(text.lower() if self.lowercase else text)
        else:
            text = fold_width(text)
            if self.lowercase:  # before looking for marks: lowercasing may change them
                text = _lower(text)
            if self.pattern == _DEFAULT_PATTERN:
                marked, mark = _marked_words()
                if mark.search(text):
                    regex = marked
            words = cjk_tokens(text, regex.findall) if has_cjk(text) else regex.findall(text)
        if self.pattern != _DEFAULT_PATTERN and "" in words:  # r"\w*" matches nothing between words
            words = [w for w in words if w]
        return words

    def words_array(self, texts: Any) -> tuple[Any, npt.NDArray[np.int64]]:
        """The words of many texts, stopword phrases dropped: ``self.drop_phrases(self.words(t))``
        of each text of ``texts`` (a ``pyarrow`` string or large_string array without nulls),
        back to back as a ``pyarrow`` large_string array, and how many each text has, int64 (n,).

        With the default pattern and no stopword phrases, ASCII texts are split by Arrow's
        compute functions (for ASCII text, ``\\b\\w\\w+\\b`` is a maximal run of at least two of
        ``[A-Za-z0-9_]``: no Python string per word); the other texts, and every text under
        another pattern or with phrases, go through :meth:`words` one by one.
        """
        import pyarrow as pa
        import pyarrow.compute as pc

        n = len(texts)
        counts = np.zeros(n, np.int64)
        if self.pattern != _DEFAULT_PATTERN or self._phrases:
            lists = [self.drop_phrases(self.words(t)) for t in texts.to_pylist()]
            counts[:] = [len(ws) for ws in lists]
            return pa.array([w for ws in lists for w in ws], pa.large_string()), counts
        ascii_rows = np.asarray(pc.string_is_ascii(texts), dtype=bool) if n else np.zeros(0, bool)
        fast = texts if ascii_rows.all() else pc.if_else(pa.array(ascii_rows), texts, pa.scalar("", texts.type))
        if self.lowercase:
            fast, pattern = pc.ascii_lower(fast), "[^a-z0-9_]+"
        else:
            pattern = "[^A-Za-z0-9_]+"
        pieces = pc.split_pattern_regex(fast, pattern=pattern)
        flat = pc.list_flatten(pieces)
        keep = np.asarray(pc.greater_equal(pc.binary_length(flat), 2), dtype=bool)
        per_row = np.asarray(pc.list_value_length(pieces), dtype=np.int64)
        counts += np.bincount(np.repeat(np.arange(n, dtype=np.int64), per_row)[keep], minlength=n)
        words = flat.filter(pa.array(keep)).cast(pa.large_string())
        slow = np.flatnonzero(~ascii_rows)
        if not len(slow):
            return words, counts
        slow_words = [self.words(t) for t in texts.take(pa.array(slow)).to_pylist()]
        counts[slow] = [len(ws) for ws in slow_words]
        # every text's words in row order: the fast ones from ``words``, the others after them
        ends = np.cumsum(counts)
        starts = np.where(ascii_rows, np.cumsum(np.where(ascii_rows, counts, 0)) - counts,
                          len(words) + np.cumsum(np.where(ascii_rows, 0, counts)) - counts)
        order = np.arange(int(ends[-1]), dtype=np.int64) + np.repeat(starts - (ends - counts), counts)
        both = pa.concat_arrays([words, pa.array([w for ws in slow_words for w in ws], pa.large_string())])
        return both.take(pa.array(order)), counts

    def term(self, word: str) -> str | None:
        """The token of one word of :meth:`words`: ``None`` for a stopword, else its stem."""
        if word in self._stop:
            return None
        if self._stem is None:
            return word
        stem = self._stem_cache.get(word)
        if stem is None:
            stem = self._stem_cache[word] = self._stem.stemWord(word)
        return stem or None

    def many(self, texts: Iterable[str]) -> list[list[str]]:
        """Tokens of many texts."""
        return [self(t) for t in texts]

    def fingerprint(self) -> str:
        """The class and :meth:`to_config` (:class:`~kolm_search.contract.ports.Fingerprinted`): what an
        index's tokens depend on. A subclass with state of its own overrides it."""
        import json

        return f"{type(self).__qualname__}{json.dumps(self.to_config(), sort_keys=True)}"

    def to_config(self) -> dict[str, Any]:
        """JSON-ready configuration: the language, and the stopwords as the list itself.

        The words are written out (not a list's name) for every list but Lucene's English set,
        so a saved index tokenises queries as it did when built, whatever version of
        ``stopwordsiso`` is installed later.
        """
        stop: Any = sorted(self._entries) if self._entries != ENGLISH_STOPWORDS else "english"
        if not self._entries:
            stop = None
        return {"lowercase": self.lowercase, "pattern": self.pattern, "stopwords": stop, "stemmer": self._stem_name,
                "language": self.language}

    def __getstate__(self) -> dict[str, Any]:
        # the compiled stemmer cannot be pickled: travel as configuration, rebuild on arrival;
        # a subclass's own attributes (its fields, what its __init__ set) travel as they are
        own = {k: v for k, v in vars(self).items() if k not in _FIELDS}
        return {**self.to_config(), "attributes": own} if own else self.to_config()

    def __setstate__(self, state: dict[str, Any]) -> None:
        state = dict(state)
        vars(self).update(state.pop("attributes", {}))  # first: a subclass's __post_init__ may read them
        Tokenizer.__init__(self, **state)  # not a subclass's __init__, whose parameters may differ

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Tokenizer:
        """Inverse of :meth:`to_config`."""
        return cls(**config)


_FIELDS = frozenset(f.name for f in fields(Tokenizer))
