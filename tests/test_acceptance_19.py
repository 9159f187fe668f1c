"""Acceptance probes of issue 19 (fusion methods, filter operators, languages) that found bugs:
each test is written from the issue text and checks against an oracle (Lucene's word-break
classes through the ``regex`` module's Unicode properties, a plain pandas evaluation, ranx)."""

from __future__ import annotations

import itertools
import unicodedata
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kolm_search import SearchDocument
from kolm_search.doctable import DocumentTable
from kolm_search.languages import ENGLISH_STOPWORDS
from kolm_search.retrievers.bm25 import BM25Retriever
from kolm_search.text import Tokenizer

try:
    import regex  # Unicode Script and Word_Break properties (an oracle only)
except ImportError:  # pragma: no cover
    regex = None


# -- languages: CJK bigrams as Lucene's StandardTokenizer + CJKBigramFilter make them ---------
def test_katakana_middle_dot_breaks_a_run_as_in_lucene() -> None:
    """U+30FB (and its half-width form) is punctuation, not Katakana, for UAX#29: Lucene's
    StandardTokenizer drops it, so the bigrams stop at it."""
    tok = Tokenizer(language="ja")
    want = ["ジョ", "ョン", "スミ", "ミス"]
    assert tok("ジョン・スミス") == want
    assert tok("ｼﾞｮﾝ･ｽﾐｽ") == want  # half-width katakana and dot, folded by NFKC


def test_hangul_jamo_are_bigrammed_like_syllables() -> None:
    """Compatibility jamo (``ㅋㅋㅋ``) are Hangul letters for Lucene; NFKC makes them conjoining
    jamo, which must stay CJK rather than become one long word."""
    tok = Tokenizer(language="ko")
    folded = unicodedata.normalize("NFKC", "ㅋ")
    assert tok("ㅋㅋㅋ") == [folded * 2, folded * 2]
    assert tok("한국어 ㅋ") == ["한국", "국어", folded]


def _lucene_cjk(text: str) -> list[str]:
    """CJKAnalyzer (with NFKC for its width filter): characters of the Han or Hiragana script,
    of Word_Break Katakana, or Hangul letters make runs of bigrams (a lone one a unigram)."""
    cjk = regex.compile(r"[\p{Script=Han}\p{Script=Hiragana}\p{WB=Katakana}]|[\p{Script=Hangul}&&\p{WB=ALetter}]",
                        flags=regex.V1)
    words = Tokenizer(language="cjk")._regex.findall
    text = unicodedata.normalize("NFKC", text).lower()
    out: list[str] = []
    for is_cjk, group in itertools.groupby(text, key=lambda ch: bool(cjk.match(ch))):
        chars = "".join(group)
        if not is_cjk:
            out.extend(words(chars))
        elif len(chars) == 1:
            out.append(chars)
        else:
            out.extend(a + b for a, b in itertools.pairwise(chars))
    return [t for t in out if t not in ENGLISH_STOPWORDS]


ALPHABET = st.sampled_from([*"東京の学校にタワーカ한국어ひら々・･。、「」ｶﾀﾅｰＡＢ１ ab12ㅋ가", " the ", "ジョン・スミス"])


@pytest.mark.skipif(regex is None, reason="needs the regex module")
@settings(max_examples=300, deadline=None)
@given(st.lists(ALPHABET, max_size=30).map("".join))
def test_cjk_tokens_equal_lucenes_character_classes(text: str) -> None:
    assert Tokenizer(language="cjk")(text) == _lucene_cjk(text)


# -- filters: a saved table keeps metadata values of numpy types ------------------------------
def test_numpy_metadata_filters_alike_after_save_and_load(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    docs = [SearchDocument(id=f"d{i}", content="x", tags=[f"t{rng.integers(3)}"],
                           metadata={"year": np.int64(rng.integers(2000, 2010)),
                                     "price": np.float32(rng.integers(0, 8) / 4),
                                     "flag": np.bool_(rng.random() < 0.5),
                                     "codes": np.array(rng.integers(0, 5, 2))})
            for i in range(40)]
    table = DocumentTable.from_documents(docs)
    table.save(tmp_path / "t.parquet")
    back = DocumentTable.load(tmp_path / "t.parquet")
    frame = pd.DataFrame([{"year": int(d.metadata["year"]), "price": float(d.metadata["price"]),
                           "flag": bool(d.metadata["flag"]), "codes": list(d.metadata["codes"])} for d in docs])
    cases: list[tuple[dict[str, Any], pd.Series]] = [
        ({"year": {"$gte": 2005}}, frame.year >= 2005),
        ({"year": 2003}, frame.year == 2003),
        ({"price": {"$lt": 1}}, frame.price < 1),
        ({"price": 0.5}, frame.price == 0.5),
        ({"flag": True}, frame.flag),
        ({"$or": [{"codes": 3}, {"flag": False}]}, frame.codes.map(lambda c: 3 in c) | ~frame.flag),
    ]
    for f, want in cases:
        for t in (table, back):
            mask = t.filter_mask(f)
            assert mask is not None
            np.testing.assert_array_equal(mask, want.to_numpy(bool), err_msg=str(f))


def test_bm25_index_with_numpy_metadata_filters_after_a_round_trip(tmp_path: Path) -> None:
    years = np.array([2001, 2002, 2003], dtype=np.int64)  # numpy scalars, as a DataFrame row gives them
    corpus = [SearchDocument(id=i, content=f"red {i}", metadata={"year": y}) for i, y in zip("abc", years, strict=True)]
    ret = BM25Retriever(corpus)
    ret.save(tmp_path / "idx")
    back = BM25Retriever.load(tmp_path / "idx")
    for r in (ret, back):
        mask = r.table.filter_mask({"year": {"$gt": 2001}})
        assert mask is not None and mask.tolist() == [False, True, True]
