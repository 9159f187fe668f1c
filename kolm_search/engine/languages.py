"""Languages for the tokenizer: names and codes, stopword lists, CJK character bigrams.

- Every Snowball stemmer of PyStemmer is a language here, named as PyStemmer names it
  (``"french"``) or by its ISO 639-1 code (``"fr"``); ``"porter"`` and ``"dutch_porter"`` are
  English and Dutch with the older stemmers.
- Stopword lists: English is Lucene's ``EnglishAnalyzer`` set (33 words, what bm25s and
  Anserini use, so scores compare token for token); every other language takes its list from
  `stopwords-iso <https://github.com/stopwords-iso/stopwords-iso>`_ (the ``stopwordsiso``
  package). No maintained list exists there for Nepali, Serbian, Tamil and Yiddish: those
  languages stem but keep every word (:func:`stopword_languages` lists the others).
- Chinese, Japanese and Korean (``"cjk"``, ``"zh"``, ``"ja"``, ``"ko"``): runs of CJK
  characters become overlapping character bigrams, a lone character a unigram, as Lucene's
  ``CJKAnalyzer`` does (after NFKC width folding); the rest of the text is tokenised as usual
  with Lucene's English stop set and no stemming. :func:`cjk_tokens` applies to every
  language: a run of CJK characters is never one long token.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from functools import cache

from kolm_search.errors import KolmValueError

__all__ = ["CJK_LANGUAGES", "ENGLISH_STOPWORDS", "cjk_tokens", "fold_width", "has_cjk", "normalize_language",
           "stopword_languages", "stopwords_for"]

# Lucene's EnglishAnalyzer default stop set (33 words).
ENGLISH_STOPWORDS: frozenset[str] = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their "
    "then there these they this to was will with".split()
)

# ISO 639-1 code of each Snowball language of PyStemmer (None: no code; the name is used).
_CODES: dict[str, str | None] = {
    "arabic": "ar", "armenian": "hy", "basque": "eu", "catalan": "ca", "czech": "cs",
    "danish": "da", "dutch": "nl", "dutch_porter": "nl", "english": "en", "esperanto": "eo",
    "estonian": "et", "finnish": "fi", "french": "fr", "german": "de", "greek": "el",
    "hindi": "hi", "hungarian": "hu", "indonesian": "id", "irish": "ga", "italian": "it",
    "lithuanian": "lt", "nepali": "ne", "norwegian": "no", "persian": "fa", "polish": "pl",
    "porter": "en", "portuguese": "pt", "romanian": "ro", "russian": "ru", "serbian": "sr",
    "sesotho": "st", "spanish": "es", "swedish": "sv", "tamil": "ta", "turkish": "tr",
    "yiddish": "yi",
}
_BY_CODE = {code: name for name, code in _CODES.items() if code and name not in ("porter", "dutch_porter")}
CJK_LANGUAGES: frozenset[str] = frozenset({"cjk", "chinese", "japanese", "korean", "zh", "ja", "ko"})

# Han (with extensions and compatibility ideographs), Hiragana, Katakana, Hangul (syllables and
# jamo: NFKC turns compatibility jamo such as "ㅋ" into conjoining ones), bopomofo. Not the katakana
# middle dot U+30FB: punctuation, a word break for Lucene's StandardTokenizer ("ジョン・スミス").
_CJK_CLASS = (r"\u1100-\u11ff\u2e80-\u2fdf\u3005\u3007\u3021-\u3029\u3038-\u303b\u3040-\u30fa\u30fc-\u30ff"
              r"\u3100-\u312f"
              r"\u3131-\u318f\u31a0-\u31bf\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\ua960-\ua97f"
              r"\uac00-\ud7af\ud7b0-\ud7ff\uf900-\ufaff\uff66-\uff9f\U00020000-\U0003134f")
_CJK_RUN = re.compile(f"[{_CJK_CLASS}]+")


def normalize_language(language: str) -> str:
    """Canonical name of a language: a PyStemmer name, or ``"cjk"``.

    Parameters
    ----------
    language : str
        A name (``"French"``), an ISO 639-1 code (``"fr"``) or a BCP 47 tag starting with one
        (``"pt-BR"``, ``"zh-Hans"``), or a CJK name or code.

    Raises
    ------
    KolmValueError
        Naming the unknown language and the known ones.
    """
    if not isinstance(language, str):
        raise KolmValueError(f"language must be a str, got {type(language).__name__}")
    key = language.strip().lower().replace("-", "_")
    for candidate in (key, key.split("_")[0]):  # a BCP 47 tag ("pt-BR", "zh-Hans") by its language
        if candidate in CJK_LANGUAGES:
            return "cjk"
        if candidate in _CODES:
            return candidate
        if candidate in _BY_CODE:
            return _BY_CODE[candidate]
    known = ", ".join([*sorted(_CODES), "cjk"])
    raise KolmValueError(f"unknown language {language!r}; known: {known} (or their ISO 639-1 codes)")


@cache
def _iso_lists() -> dict[str, frozenset[str]]:
    import stopwordsiso

    # NFKC as the tokenizer folds text (Armenian's ligature "և" becomes "եւ" on both sides)
    return {code: frozenset(fold_width(w) for w in stopwordsiso.stopwords(code)) for code in stopwordsiso.langs()}


def stopwords_for(language: str) -> frozenset[str]:
    """The stopword list of a language (empty where no maintained list exists).

    Parameters
    ----------
    language : str
        Any form :func:`normalize_language` accepts.
    """
    name = normalize_language(language)
    if name in ("english", "porter", "cjk"):
        return ENGLISH_STOPWORDS
    code = _CODES[name]
    return _iso_lists().get(code or "", frozenset())


def stopword_languages() -> list[str]:
    """Languages (PyStemmer names) that have a stopword list."""
    return sorted(name for name in _CODES if stopwords_for(name))


def has_cjk(text: str) -> bool:
    """Whether ``text`` contains a CJK character."""
    return _CJK_RUN.search(text) is not None


def fold_width(text: str) -> str:
    """NFKC normalisation: Lucene's ``CJKWidthFilter`` and more (ligatures, compatibility forms)."""
    return unicodedata.normalize("NFKC", text)


def cjk_tokens(text: str, words: Callable[[str], list[str]]) -> list[str]:
    """Tokens of a text with CJK runs: bigrams of each run, ``words`` for the rest, in order.

    Parameters
    ----------
    text : str
        Already NFKC-normalised (full-width Latin letters and digits as ASCII, half-width
        katakana full-width: :func:`fold_width`) and lowercased if the tokenizer lowercases.
    words : callable
        Tokenises a stretch of text without CJK characters (the tokenizer's pattern).
    """
    out: list[str] = []
    pos = 0
    for m in _CJK_RUN.finditer(text):
        if m.start() > pos:
            out.extend(words(text[pos:m.start()]))
        run = m.group()
        if len(run) == 1:
            out.append(run)
        else:
            out.extend(run[i:i + 2] for i in range(len(run) - 1))
        pos = m.end()
    if pos < len(text):
        out.extend(words(text[pos:]))
    return out
