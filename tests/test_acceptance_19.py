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
from kolm_search.engine.doctable import DocumentTable
from kolm_search.engine.languages import ENGLISH_STOPWORDS
from kolm_search.engine.text import Tokenizer
from kolm_search.retrievers.bm25 import BM25Retriever

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


# -- fusion ---------------------------------------------------------------------------------
def test_fuse_frame_with_too_few_lists_is_a_clear_error() -> None:
    from kolm_search.engine.candidate_frame import CandidateFrame
    from kolm_search.errors import KolmValueError
    from kolm_search.fusion import fuse_frame

    stacked = CandidateFrame.concat([CandidateFrame.from_ptr([0, 3], [5, 6, 7], [3.0, 2.0, 1.0]),
                                     CandidateFrame.from_ptr([0, 2], [6, 8], [1.0, 0.5])])
    for method in ("sum", "rrf", "condorcet", "bordafuse", "max"):
        with pytest.raises(KolmValueError, match=r"list ids must lie in \[0, n_lists=1\)"):
            fuse_frame(stacked, method=method, n_lists=1)
    assert len(fuse_frame(stacked, method="sum", n_lists=3)) == 4  # an extra empty list is fine


def _two_runs() -> tuple[dict[str, pd.DataFrame], pd.DataFrame]:
    rng = np.random.default_rng(5)
    runs = {name: pd.DataFrame({"qid": np.repeat([f"q{i}" for i in range(4)], 6),
                                "doc_id": [f"d{i}" for _ in range(4) for i in rng.permutation(6)],
                                "score": rng.random(24)}) for name in ("bm25", "dense")}
    qrels = pd.DataFrame({"qid": ["q0", "q1", "q2", "q3"], "doc_id": ["d1", "d2", "d5", "d0"],
                          "relevance": [1, 2, 1, 1]})
    return runs, qrels


def test_optimize_fusion_takes_weight_vectors_by_run_name() -> None:
    """Weights by run name work in fuse, params and fit_fusion: in a grid too, equal to the
    same vectors in run order."""
    from kolm_search import optimize_fusion

    runs, qrels = _two_runs()
    by_name = optimize_fusion(runs, qrels, "ndcg@5", method="wsum", norm="min-max",
                              grid={"weights": [{"bm25": 0.3, "dense": 0.7}, {"dense": 0.0}]})
    by_order = optimize_fusion(runs, qrels, "ndcg@5", method="wsum", norm="min-max",
                               grid={"weights": [[0.3, 0.7], [1.0, 0.0]]})
    assert by_name["params"] == by_order["params"] and by_name["score"] == by_order["score"]
    assert by_name["trials"]["weights"].tolist() == by_order["trials"]["weights"].tolist()


@pytest.mark.parametrize("grid, match", [
    ({"weights": [{"sparse": 1.0}]}, "unknown runs"),
    ({"weights": ["ab"]}, "not a vector"),
    ({"weights": [[1, "x"]]}, "not a vector of numbers"),
    ({"k": 10}, r"grid\['k'\] must be a list"),
    ({"k": "10"}, r"grid\['k'\] must be a list"),
])
def test_bad_grids_are_clear_errors(grid: dict[str, Any], match: str) -> None:
    from kolm_search import optimize_fusion
    from kolm_search.errors import KolmValueError

    runs, qrels = _two_runs()
    with pytest.raises(KolmValueError, match=match):
        optimize_fusion(runs, qrels, method="rrf", grid=grid)


@pytest.mark.parametrize("method", ["wsum", "rrf", "probfuse", "bayesfuse", "sum"])
def test_qrels_of_other_queries_are_an_error_not_a_nan_score(method: str) -> None:
    """ranx asserts that qrels and runs share their queries; a fit on qrels judging none of the
    runs' queries would train empty tables and pick a grid point by NaN scores."""
    from kolm_search import fit_fusion, optimize_fusion
    from kolm_search.errors import KolmValueError

    runs, qrels = _two_runs()
    other = qrels.assign(qid="elsewhere")
    with pytest.raises(KolmValueError, match="judge no query of the runs"):
        optimize_fusion(runs, other, method=method)
    if method != "sum":  # sum has nothing to train nor search
        with pytest.raises(KolmValueError, match="judge no query of the runs"):
            fit_fusion(runs, other, method)
    assert np.isfinite(optimize_fusion(runs, qrels, method=method)["score"])


# -- filters: dates and timestamps --------------------------------------------------------------
def test_date_metadata_filters_alike_before_and_after_a_save(tmp_path: Path) -> None:
    """A DataFrame's datetime column becomes Timestamp metadata; a saved table keeps it as text.
    Filters on it (ISO strings or date operands) give the pandas answer on both."""
    import datetime

    rng = np.random.default_rng(11)
    stamps = pd.to_datetime("2020-01-01") + pd.to_timedelta(rng.integers(0, 900, 30), unit="D")
    stamps = stamps.where(rng.random(30) > 0.2)  # some NaT: missing
    frame = pd.DataFrame({"id": [f"d{i}" for i in range(30)], "content": ["x"] * 30, "published": stamps})
    table = DocumentTable.from_frame(frame)
    table.save(tmp_path / "t.parquet")
    back = DocumentTable.load(tmp_path / "t.parquet")
    pub = frame.published
    cases: list[tuple[dict[str, Any], pd.Series]] = [
        ({"published": {"$gte": "2021-03"}}, pub >= "2021-03-01"),
        ({"published": {"$lt": datetime.date(2020, 7, 1)}}, pub < "2020-07-01"),
        ({"published": {"$gt": pd.Timestamp("2021-01-01")}, "$not": {"published": {"$gt": "2022"}}},
         (pub > "2021-01-01") & ~(pub > "2022-01-01")),
        ({"published": {"$exists": False}}, pub.isna()),
        ({"published": {"$in": [stamps[3], np.datetime64(stamps[5])]}}, pub.isin([stamps[3], stamps[5]])),
    ]
    for f, want in cases:
        for t in (table, back):
            mask = t.filter_mask(f)
            assert mask is not None
            np.testing.assert_array_equal(mask, want.to_numpy(bool), err_msg=f"{f} {t is back}")


# -- languages: codes as applications write them -------------------------------------------------
@pytest.mark.parametrize("tag, name", [("pt-BR", "portuguese"), ("en_US", "english"), ("zh-Hans", "cjk"),
                                       ("zh-CN", "cjk"), ("ko-KR", "cjk"), ("ja-JP", "cjk"), ("FR-ca", "french"),
                                       ("dutch_porter", "dutch_porter")])
def test_bcp47_tags_name_their_language(tag: str, name: str) -> None:
    assert Tokenizer(language=tag).language == name
    assert Tokenizer(language=tag)("Os pesquisadores 東京 bigram") == Tokenizer(language=name)("Os pesquisadores 東京 bigram")


@pytest.mark.parametrize("bad", ["xx-YY", "elvish", "_", "klingon-KL"])
def test_unknown_tags_stay_errors(bad: str) -> None:
    from kolm_search.errors import KolmValueError

    with pytest.raises(KolmValueError, match="unknown language"):
        Tokenizer(language=bad)


# -- languages: scripts that write vowels as combining marks ---------------------------------------
SENTENCES = {"hindi": "हिन्दी भाषा बहुत सुंदर है", "nepali": "नेपाली भाषा राम्रो छ",
             "tamil": "தமிழ் மொழி மிகவும் அழகானது", "yiddish": "ייִדיש איז אַ שפּראַך"}


@pytest.mark.parametrize("language", list(SENTENCES))
def test_words_with_combining_marks_stay_whole(language: str) -> None:
    """UAX#29 (Lucene's StandardTokenizer) keeps a word's marks (WB4): a space-separated
    sentence splits into its words; Python's ``\\w`` alone cut them at every vowel sign."""
    text = unicodedata.normalize("NFKC", SENTENCES[language])
    bare = Tokenizer(language=language, stopwords=None, stemmer=None)
    assert bare(text) == [w for w in text.split() if len(w) > 1]
    stemmer = Tokenizer(language=language)._stem
    stop = Tokenizer(language=language)._stop
    assert Tokenizer(language=language)(text) == [stemmer.stemWord(w) for w in bare(text) if w not in stop]


LETTERS = st.sampled_from(list("कखगनमरसतपहअइ") + list("தமழமொழநக"))
MARKS = st.sampled_from(list("\u093f\u094d\u0941\u0947\u0902\u0bbf\u0bcd\u0bca\u0bbe"))
WORD = st.lists(st.tuples(LETTERS, st.lists(MARKS, max_size=2)), min_size=1, max_size=5).map(
    lambda parts: "".join(ch + "".join(m) for ch, m in parts))


@settings(max_examples=200, deadline=None)
@given(st.lists(WORD, min_size=1, max_size=6))
def test_marked_words_split_only_at_spaces(words: list[str]) -> None:
    text = unicodedata.normalize("NFKC", " ".join(words))
    assert Tokenizer(stopwords=None, stemmer=None)(text) == [w for w in text.split() if len(w) > 1]


# -- filters: nested metadata -----------------------------------------------------------------------
def test_dotted_paths_reach_nested_metadata_as_pandas_json_normalize() -> None:
    rng = np.random.default_rng(3)
    metas: list[dict[str, Any] | None] = []
    for _ in range(40):
        m: dict[str, Any] = {}
        if rng.random() < 0.8:
            m["author"] = {"name": str(rng.choice(["ann", "bob", "cy"]))}
            if rng.random() < 0.7:
                m["author"]["born"] = int(rng.integers(1950, 2000))
        if rng.random() < 0.3:
            m["author"] = "anonymous"  # not a dict: the path breaks off
        metas.append(m or None)
    docs = [SearchDocument(id=f"d{i}", content="x", metadata=m) for i, m in enumerate(metas)]
    table = DocumentTable.from_documents(docs)
    flat = pd.json_normalize([m or {} for m in metas])
    name, born = flat["author.name"], flat["author.born"]  # NaN where author is a string or absent
    cases: list[tuple[dict[str, Any], pd.Series]] = [
        ({"author.name": "bob"}, name == "bob"),
        ({"metadata.author.name": {"$in": ["ann", "cy"]}}, name.isin(["ann", "cy"])),
        ({"author.born": {"$gte": 1975}}, born >= 1975),
        ({"author.born": {"$exists": False}}, born.isna()),
        ({"$or": [{"author.name": "ann"}, {"author": "anonymous"}]}, (name == "ann") | (flat["author"] == "anonymous")),
    ]
    for f, want in cases:
        mask = table.filter_mask(f)
        assert mask is not None
        np.testing.assert_array_equal(mask, want.to_numpy(bool), err_msg=str(f))
    with pytest.raises(Exception, match="unknown filter field 'author.nick'"):
        table.filter_mask({"author.nick": "x"})
    literal = DocumentTable.from_documents([SearchDocument(id="a", content="x", metadata={"a.b": 1, "a": {"b": 2}})])
    assert literal.filter_mask({"a.b": 1}).tolist() == [True]  # a key spelt with a dot wins
