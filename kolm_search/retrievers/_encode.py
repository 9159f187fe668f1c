"""Tokenised texts as term ids, and term ids as doc-major counts: the per-chunk work of
:mod:`~kolm_search.retrievers._parallel`, in a worker or in this process.

A tokenizer's output is checked row by row (a list of non-empty str; anything else names the
document row); terms are numbered in order of first occurrence, so the ids do not depend on how
the corpus was split.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from kolm_search.engine.text import Tokenizer
from kolm_search.errors import KolmError, KolmTypeError, KolmValueError

__all__ = ["Counted", "count_ids", "encode_array", "encode_texts", "encode_tokens"]

#: (lengths int64 (n,), distinct terms per document int64 (n,), term ids int32 (nnz,), tf int32 (nnz,))
Counted = tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int32], npt.NDArray[np.int32]]


def _row_error(row: int, exc: Exception) -> KolmValueError:
    what = str(exc) if isinstance(exc, KolmError) else f"{type(exc).__name__}: {exc}"
    return KolmValueError(f"document row {row}: tokenising failed: {what}")


def _token_list(tokens: Iterable[str], row: int) -> Sequence[str]:
    """``tokens`` as a list or tuple, read once (a generator cannot be read twice); a str (whose
    characters would become the tokens) or a non-iterable is a ``KolmTypeError``."""
    if isinstance(tokens, list | tuple):
        return tokens
    if isinstance(tokens, str | bytes):
        raise KolmTypeError(f"document row {row}: a tokenizer must return a list of str, got a "
                            f"{type(tokens).__name__} ({tokens[:40]!r})")
    try:
        return list(tokens)
    except TypeError as exc:
        raise KolmTypeError(f"document row {row}: tokens must be an iterable of str ({exc})") from exc
    except Exception as exc:  # raised while a lazy tokenizer runs
        raise _row_error(row, exc) from exc


def _bad_token(tokens: Sequence[Any], row: int) -> KolmError | None:
    """The error for the first token of ``tokens`` that is not a non-empty str (None: all are)."""
    for pos, t in enumerate(tokens):
        if not isinstance(t, str):
            return KolmTypeError(f"document row {row}: token {pos} is {t!r:.40} of type {type(t).__name__}; "
                                 "a tokenizer must return a list of non-empty str")
        if not t:
            return KolmValueError(f"document row {row}: token {pos} is the empty string; "
                                  "a tokenizer must return a list of non-empty str")
    return None


def _tokenize(tokenizer: Callable[[str], Iterable[str]], text: str, row: int) -> Sequence[str]:
    try:
        tokens = tokenizer(text)
    except Exception as exc:
        raise _row_error(row, exc) from exc
    return _token_list(tokens, row)


def encode_texts(tokenizer: Callable[[str], Sequence[str]], texts: Iterable[str], start: int,
                 vocab: dict[str, int], word_ids: dict[str, int]) -> tuple[list[int], list[int]]:
    """Term ids of texts, back to back, and the number of ids per text.

    A plain :class:`Tokenizer` is applied word by word (:meth:`Tokenizer.words`), each
    distinct word mapped once through ``word_ids`` (-1 for a stopword, dropped by
    :func:`count_ids`); any other callable is called per text. New terms enter ``vocab``
    in order of first occurrence. An error names the document row (``start`` + position).
    """
    if type(tokenizer) is not Tokenizer:  # a subclass may override __call__: call it
        lists = (_tokenize(tokenizer, text, row) for row, text in enumerate(texts, start))
        return encode_tokens(lists, vocab, start)
    row = start
    ids: list[int] = []
    lens: list[int] = []
    get, words, term, setdefault = word_ids.__getitem__, tokenizer.words, tokenizer.term, vocab.setdefault
    drop = tokenizer.drop_phrases
    try:
        for row, text in enumerate(texts, start):  # noqa: B007 (the row an error names)
            ws = drop(words(text))
            n0 = len(ids)
            try:
                ids += map(get, ws)
            except KeyError:  # new words: map them (in order, so new terms enter in order)
                del ids[n0:]
                for w in ws:
                    if w not in word_ids:
                        t = term(w)
                        word_ids[w] = -1 if t is None else setdefault(t, len(vocab))
                ids += map(get, ws)
            lens.append(len(ids) - n0)
    except Exception as exc:
        raise _row_error(row, exc) from exc
    return ids, lens


def encode_tokens(token_lists: Iterable[Sequence[str]], vocab: dict[str, int], start: int = 0,
                  ) -> tuple[list[int], list[int]]:
    """Term ids of token lists, back to back, and their lengths (new terms enter ``vocab``).

    A token list that is not a list or tuple (a generator, say) is read once into a list:
    its tokens are mapped twice when some are new. Tokens must be non-empty str: anything else
    (a str instead of a list, a tuple or number token, an empty string) raises
    ``KolmTypeError``/``KolmValueError`` naming its document row (``start`` + position) and
    token. Only tokens new to ``vocab`` are checked: every term in it passed the check.
    """
    ids: list[int] = []
    lens: list[int] = []
    get, setdefault = vocab.__getitem__, vocab.setdefault
    for row, given in enumerate(token_lists, start):
        tokens = _token_list(given, row)
        n0 = len(ids)
        try:
            ids += map(get, tokens)
        except (KeyError, TypeError):  # new (or unhashable) tokens: check, then number them
            del ids[n0:]
            bad = _bad_token(tokens, row)
            if bad is not None:
                raise bad from None
            ids += [setdefault(t, len(vocab)) for t in tokens]
        lens.append(len(ids) - n0)
    return ids, lens


def encode_array(tokenizer: Callable[[str], Sequence[str]], texts: Any, start: int, vocab: dict[str, int],
                 word_ids: dict[str, int]) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.int64]]:
    """:func:`encode_texts` of a ``pyarrow`` string array without nulls: term ids int32 (n_ids,)
    (-1 for a stopword) and ids per text int64 (n,), the same values.

    A plain :class:`Tokenizer` splits all the texts at once (:meth:`Tokenizer.words_array`)
    and the words are numbered by Arrow (``dictionary_encode``: each distinct word once, in
    order of first occurrence), so only the distinct words are looked up in ``word_ids``, in
    that order (new terms enter ``vocab`` as :func:`encode_texts` enters them). Any other
    tokenizer, or a failure, goes through :func:`encode_texts` (which names the row).
    """
    import pyarrow.compute as pc

    if type(tokenizer) is not Tokenizer:
        ids, lens = encode_texts(tokenizer, texts.to_pylist(), start, vocab, word_ids)
        return np.asarray(ids, np.int32), np.asarray(lens, np.int64)
    try:
        words, counts = tokenizer.words_array(texts)
        coded = pc.dictionary_encode(words)
        distinct = coded.dictionary.to_pylist()
        known = list(map(word_ids.get, distinct))
        if None in known:  # new words, in order of first occurrence: map them in that order
            term, setdefault = tokenizer.term, vocab.setdefault
            for i, w in enumerate(distinct):
                if known[i] is None:
                    t = term(w)
                    known[i] = word_ids[w] = -1 if t is None else setdefault(t, len(vocab))
        remap = np.asarray(known, np.int32)
        codes = coded.indices.to_numpy(zero_copy_only=False) if len(coded) else np.zeros(0, np.int32)
        return remap[codes], counts
    except Exception:  # find the row: the text-by-text path names it
        ids, lens = encode_texts(tokenizer, texts.to_pylist(), start, vocab, word_ids)
        return np.asarray(ids, np.int32), np.asarray(lens, np.int64)


def count_ids(ids: npt.NDArray[np.int32], lens: npt.NDArray[np.int64], n_vocab: int) -> Counted:
    """Doc-major counts of term ids (int32 (n_ids,), -1 = dropped) in documents of ``lens`` ids."""
    n = int(lens.shape[0])
    keep = ids >= 0
    if not keep.all():
        ids = ids[keep]
        lens = np.bincount(np.repeat(np.arange(n, dtype=np.int64), lens)[keep], minlength=n).astype(np.int64)
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum(lens, out=ptr[1:])
    m = sp.csr_matrix((np.ones(ids.shape[0], np.int32), ids, ptr), shape=(n, n_vocab))
    m.sum_duplicates()  # one entry per (document, term), its data the count
    return (lens.astype(np.int64, copy=False), np.diff(m.indptr).astype(np.int64),
            m.indices.astype(np.int32, copy=False), m.data.astype(np.int32, copy=False))
