"""Languages: every Snowball stemmer with its stopword list, ISO codes, CJK bigrams, saved indexes."""

from __future__ import annotations

import itertools
import unicodedata
from pathlib import Path

import pandas as pd
import pytest
import Stemmer
import stopwordsiso
from hypothesis import given, settings
from hypothesis import strategies as st

from kolm_search import BM25Retriever, KolmValueError, Tokenizer
from kolm_search.engine.languages import (
    ENGLISH_STOPWORDS,
    normalize_language,
    stopword_languages,
    stopwords_for,
)

SNOWBALL = sorted(Stemmer.algorithms())
ISO = {"french": "fr", "german": "de", "russian": "ru", "spanish": "es", "arabic": "ar", "greek": "el",
       "finnish": "fi", "turkish": "tr", "hindi": "hi", "armenian": "hy", "basque": "eu", "sesotho": "st"}


def word_runs(text: str) -> list[str]:
    """Maximal runs (two or more characters) of word characters and combining marks of the
    NFKC-folded, lowercased text: the default pattern's tokens (UAX#29 keeps marks in words)."""
    text = unicodedata.normalize("NFKC", text).lower()
    keep = [ch.isalnum() or ch == "_" or unicodedata.category(ch).startswith("M") for ch in text]
    runs = ["".join(ch for ch, _ in group) for is_word, group in itertools.groupby(zip(text, keep, strict=True),
                                                                                    key=lambda p: p[1]) if is_word]
    return [r for r in runs if len(r) > 1]


@pytest.mark.parametrize("language", SNOWBALL)
def test_every_snowball_language_stems_and_drops_its_stopwords(language: str) -> None:
    tok = Tokenizer(language=language)
    stop = tok._stop  # the entries of one word, as documents are analysed
    words = ["zzqx", "running", "abcdefgh", *sorted(stop)[:50]]
    got = tok(" ".join(words))
    stemmer = Stemmer.Stemmer(language)
    expected = [stemmer.stemWord(w) for w in word_runs(" ".join(words)) if w not in stop]
    assert got == expected and got[:3] == [stemmer.stemWord(w) for w in words[:3]]
    # a text of nothing but stopword entries keeps nothing: an entry the pattern splits into
    # several words ("celle-ci") removes them where they follow each other
    assert tok(" ".join(sorted(tok._entries))) == []
    assert tok(" zzqx ".join(sorted(tok._entries))) == [stemmer.stemWord("zzqx")] * (len(tok._entries) - 1)


@pytest.mark.parametrize("language", sorted(ISO))
def test_stopwords_come_from_stopwords_iso(language: str) -> None:
    assert Tokenizer(language=language)._entries == frozenset(unicodedata.normalize("NFKC", w) for w in stopwordsiso.stopwords(ISO[language]))
    # the ISO code names the same language
    assert Tokenizer(language=ISO[language]).to_config() == Tokenizer(language=language).to_config()
    assert Tokenizer(language=ISO[language].upper())("word") == Tokenizer(language=language)("word")


def test_english_keeps_lucenes_stop_set_and_the_old_defaults() -> None:
    assert Tokenizer()._entries == ENGLISH_STOPWORDS == Tokenizer(language="en")._entries
    assert Tokenizer()._stop == ENGLISH_STOPWORDS - {"a"}  # one letter: never a token of the default pattern
    assert Tokenizer()("The Flows of Supersonic aircraft, é x") == ["flow", "superson", "aircraft"]
    # an index saved before languages existed still loads with the same tokenizer
    old = {"lowercase": True, "pattern": r"(?u)\b\w\w+\b", "stopwords": "english", "stemmer": "english"}
    assert Tokenizer.from_config(old).to_config() == Tokenizer().to_config()


def test_languages_without_a_maintained_list_stem_only() -> None:
    with_lists = set(stopword_languages())
    assert {"french", "german", "english", "russian", "arabic"} <= with_lists
    for language in set(SNOWBALL) - with_lists:
        tok = Tokenizer(language=language)
        assert tok._entries == tok._stop == frozenset() and tok.to_config()["stopwords"] is None


def test_explicit_stopwords_and_stemmer_override_the_language() -> None:
    tok = Tokenizer(language="french", stopwords=["chat"], stemmer=None)
    assert tok("le chat mange") == ["le", "mange"]
    assert Tokenizer(language="french", stopwords="english")("the chats") == ["chat"]
    assert Tokenizer(language="german", stemmer="english")("the running") == ["the", "run"]


@pytest.mark.parametrize("bad", ["klingon", "", "xx", 3])
def test_unknown_language_is_a_clear_error(bad: object) -> None:
    with pytest.raises(KolmValueError, match="language"):
        Tokenizer(language=bad)  # type: ignore[arg-type]
    with pytest.raises(KolmValueError, match="stopword"):
        Tokenizer(stopwords="elvish")


def _is_cjk(ch: str) -> bool:
    name = unicodedata.name(ch, "")
    return name.startswith(("CJK UNIFIED", "CJK COMPATIBILITY IDEOGRAPH", "HIRAGANA", "KATAKANA", "HANGUL"))


def reference_cjk(text: str) -> list[str]:
    """Lucene's CJKAnalyzer in plain Python: bigrams in CJK runs, unigram for a lone char."""
    text = unicodedata.normalize("NFKC", text).lower()
    out: list[str] = []
    run: list[str] = []
    other: list[str] = []

    def flush_run() -> None:
        if len(run) == 1:
            out.append(run[0])
        out.extend(a + b for a, b in itertools.pairwise(run))
        run.clear()

    def flush_other() -> None:
        out.extend(Tokenizer(language="cjk")._regex.findall("".join(other)))
        other.clear()

    for ch in text:
        if _is_cjk(ch):
            flush_other()
            run.append(ch)
        else:
            flush_run()
            other.append(ch)
    flush_run()
    flush_other()
    stop = ENGLISH_STOPWORDS
    return [t for t in out if t not in stop]


CJK_CHARS = "東京中文字日本語の学校にタワーカタカナ한국어ひらがな漢"
ALPHABET = st.sampled_from(list(CJK_CHARS) + list("ab XYZ12,.-ＡＢ１ ") + ["the ", " and "])


@settings(max_examples=300, deadline=None)
@given(st.lists(ALPHABET, max_size=40).map("".join))
def test_cjk_bigrams_equal_the_reference(text: str) -> None:
    assert Tokenizer(language="cjk")(text) == reference_cjk(text)


def test_cjk_runs_are_never_one_token_in_any_language() -> None:
    assert Tokenizer(language="ja")("東京タワーに行く") == ["東京", "京タ", "タワ", "ワー", "ーに", "に行", "行く"]
    assert Tokenizer()("Tokyo 東京 towers") == ["tokyo", "東京", "tower"]
    assert Tokenizer(language="zh")("中") == ["中"]


def test_japanese_retrieval_and_the_language_in_a_saved_index(tmp_path: Path) -> None:
    corpus = pd.DataFrame({"id": ["a", "b", "c"], "title": ["", "", ""],
                           "content": ["東京タワーは高い", "京都の寺", "大阪の食べ物"]})
    ret = BM25Retriever(corpus, tokenizer=Tokenizer(language="ja"))
    docs, scores, counts = ret.score_texts(["東京に行く", "京都"], 3)
    assert docs[0, 0] == 0 and docs[1, 0] == 1 and counts.tolist() == [1, 1]
    ret.save(tmp_path / "idx")
    back = BM25Retriever.load(tmp_path / "idx")
    assert back.tokenizer.to_config()["language"] == "cjk"
    for a, b in zip(back.score_texts(["東京に行く", "京都"], 3), (docs, scores, counts), strict=True):
        assert (a == b).all()


def test_french_index_round_trips_with_its_stopword_list(tmp_path: Path) -> None:
    corpus = pd.DataFrame({"id": ["1", "2"], "title": ["", ""],
                           "content": ["les chercheurs cherchent", "le chat dort"]})
    ret = BM25Retriever(corpus, tokenizer=Tokenizer(language="french"))
    ret.save(tmp_path / "idx")
    cfg = BM25Retriever.load(tmp_path / "idx").tokenizer.to_config()
    assert cfg["language"] == "french" and cfg["stemmer"] == "french"
    assert set(cfg["stopwords"]) == {unicodedata.normalize("NFKC", w) for w in stopwordsiso.stopwords("fr")}
    assert normalize_language("FR") == "french"


# -- issue 25, defect 3: İ, Lucene's lowercasing, stopword entries analysed as documents -----------
def test_dotted_capital_i_is_one_word_in_every_language() -> None:
    """``"İ".lower()`` is "i" + U+0307 (a combining mark): the word was cut at it
    ("İstanbul" -> ['stanbul'], "DİYARBAKIR" -> ['di', 'yarbakir']). Lucene's LowerCaseFilter maps
    one code point to one (U+0130 -> "i"), and so does the tokenizer now."""
    bare = Tokenizer(stopwords=None, stemmer=None)
    assert bare("İstanbul") == ["istanbul"] == bare("Istanbul") == bare("I\u0307stanbul")  # NFD input too
    assert bare("DİYARBAKIR İZMİR") == ["diyarbakir", "izmir"]
    for language in ("turkish", "english", "german", "french"):
        tok = Tokenizer(language=language)
        assert tok("İstanbul") == tok("Istanbul") and len(tok("DİYARBAKIR")) == 1, language
    ret = BM25Retriever(pd.DataFrame({"id": ["1", "2"], "content": ["İstanbul boğazı", "Ankara"]}),
                        tokenizer=Tokenizer(language="turkish"))
    assert ret.table.ids[ret.score_texts(["Istanbul"], 2)[0][0][0]] == "1"


def test_every_character_whose_lowercase_adds_a_mark_stays_in_its_word() -> None:
    marked = [c for c in map(chr, range(0x110000))
              if unicodedata.category(c)[0] != "M"
              and any(unicodedata.category(x)[0] == "M" for x in unicodedata.normalize("NFKC", c).lower())
              and not any(unicodedata.category(x)[0] == "M" for x in unicodedata.normalize("NFKC", c))]
    assert marked == ["\u0130"]  # Unicode 15: only İ; the test fails (and says which) if another appears
    bare = Tokenizer(stopwords=None, stemmer=None)
    for c in marked:
        assert len(bare(f"ab{c}cd {c}xy")) == 2, repr(c)


# Expected outputs of Lucene's StandardTokenizer + LowerCaseFilter (the analysis chain of
# StandardAnalyzer without stopwords), written from their documented behaviour: UAX#29 word
# boundaries, Character.toLowerCase per code point (U+0130 -> "i", U+0049 -> "i", U+1E9E -> "ß").
# kolm_search's default pattern also drops words of one character and NFKC-folds (no such word
# or character here). German stemming is Snowball's (PyStemmer), not GermanNormalizationFilter:
# languages.py claims the Snowball stemmers, so the comparison stops before stemming.
LUCENE = {
    "turkish": ("İstanbul ve DİYARBAKIR, İzmir değil; Işık ILIK. ŞEHİR ÇİÇEK ÖĞRENCİ ÜZÜM iğne",
                ["istanbul", "ve", "diyarbakir", "izmir", "değil", "işık", "ilik", "şehir", "çiçek", "öğrenci", "üzüm",
                 "iğne"]),
    "german": ("Die STRASSE heißt Königsallee; ÄRGER über Öl, Maß und Fuß. GROẞE Müller-Lüdenscheidt",
               ["die", "strasse", "heißt", "königsallee", "ärger", "über", "öl", "maß", "und", "fuß", "große", "müller",
                "lüdenscheidt"]),
}


@pytest.mark.parametrize("language", sorted(LUCENE))
def test_words_equal_lucenes_standard_tokenizer_and_lowercase_filter(language: str) -> None:
    text, lucene = LUCENE[language]
    assert Tokenizer(language=language, stopwords=None, stemmer=None)(text) == lucene
    stemmer = Stemmer.Stemmer(language)
    tok = Tokenizer(language=language)
    assert tok(text) == [stemmer.stemWord(w) for w in lucene if w not in tok._stop]


@pytest.mark.parametrize("language, entry, pieces", [("french", "celle-ci", ["celle", "ci"]),
                                                     ("indonesian", "seolah-olah", ["seolah", "olah"])])
def test_stopword_entries_are_analysed_as_documents(language: str, entry: str, pieces: list[str]) -> None:
    """An entry the tokenizer splits into several words removes them where they follow each other
    (before, "celle-ci" never matched a token and stayed in every document)."""
    tok = Tokenizer(language=language, stemmer=None)
    assert entry in stopwords_for(language) and tok.words(entry) == pieces
    assert tok(f"zzqx {entry} yyqx") == ["zzqx", "yyqx"]
    alone = [p for p in pieces if p not in tok._stop]
    assert tok(" zzqx ".join(pieces)) == [w for w in " zzqx ".join(pieces).split() if w not in tok._stop]
    if language == "indonesian":
        assert alone == ["olah"] and tok("olah raga") == ["olah", "raga"]  # a content word alone is kept
    ret = BM25Retriever(pd.DataFrame({"id": ["1"], "content": [f"zzqx {entry}"]}), tokenizer=tok)
    assert ret.vocab == ["zzqx"] and list(ret.doc_len) == [1]
