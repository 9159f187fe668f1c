"""A corpus file cut into parts that are read alone: the parts one after another are the corpus."""

from __future__ import annotations

import gzip
import itertools
import json
import random
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kolm_search.errors import FrameValidationError, KolmTypeError, KolmValueError
from kolm_search.io._text import count_line_starts, count_lines, text_lines
from kolm_search.io.corpus_parts import (
    corpus_files,
    gz_to_count,
    line_count,
    number_lines,
    pieces_to_count,
    plan_parts,
)
from kolm_search.io.corpus_stream import corpus_chunks


def _parts(source: object, n: int) -> list:
    """The plan of ``n`` parts, numbered as a sharded build numbers them (counts done here)."""
    files = corpus_files(source)
    parts = plan_parts(files, n, {p: line_count(p) for p in gz_to_count(files, n)})
    return number_lines(parts, {(p.path, p.start): p.line_starts() for _, p in pieces_to_count(parts)})


def _docs(chunks: object) -> list[tuple[str, str, int, str, str]]:
    return [(c.where, c.unit, int(x), i, t) for c in chunks for x, i, t in  # type: ignore[attr-defined]
            zip(c.numbers, c.table.ids, c.table.texts(), strict=True)]


@given(st.lists(st.sampled_from([b"ab", b"\n", b"c\n", b"\n\n", b"\xc3\xa9", b"xyz"]), max_size=30),
       st.lists(st.integers(0, 80), max_size=6))
@settings(max_examples=150, deadline=None)
def test_byte_ranges_split_a_file_into_whole_lines_numbered_as_the_whole_read(tmp_path_factory: pytest.TempPathFactory,
                                                                             pieces: list[bytes], cuts: list[int]) -> None:
    data = b"".join(pieces)
    path = tmp_path_factory.mktemp("t") / "f.txt"
    path.write_bytes(data)
    whole = list(text_lines(path))
    assert count_lines(path) == len(whole)
    bounds = [0, *sorted(min(c, len(data)) for c in cuts), len(data) + 3]
    got, first = [], 1
    for a, b in itertools.pairwise(bounds):
        got += list(text_lines(path, byte_range=(a, b), first_line=first))
        first += count_line_starts(path, a, b)
    assert got == whole
    assert list(text_lines(path, line_range=(2, 4))) == whole[1:3]


def _write_sources(root: Path) -> list[str]:
    rng = random.Random(0)

    def docs(n: int, pre: str) -> list[dict[str, str]]:
        return [{"_id": f"{pre}{i}", "title": "t" if i % 3 else "",
                 "text": " ".join(rng.choice("abcdefg") for _ in range(rng.randint(1, 8)))} for i in range(n)]

    lines = [json.dumps(d) for d in docs(120, "a")]
    lines.insert(5, "")
    lines.insert(50, "   ")
    (root / "a.jsonl").write_text("\n".join(lines))  # no newline at the end
    with gzip.open(root / "b.jsonl.gz", "wt") as fh:
        fh.write("\n".join(json.dumps(d) for d in docs(90, "b")) + "\n")
    (root / "c.tsv").write_text("".join(f"c{i}\t{d['text']}\n" for i, d in enumerate(docs(70, "c"))) + "\n\n")
    frame = pd.DataFrame({"id": [f"p{i}" for i in range(150)], "content": [d["text"] for d in docs(150, "p")]})
    frame.to_parquet(root / "d.parquet", row_group_size=37)
    return [str(root / n) for n in ("a.jsonl", "b.jsonl.gz", "c.tsv", "d.parquet")]


def test_parts_read_alone_are_the_corpus_in_order_with_its_places(tmp_path: Path) -> None:
    sources = _write_sources(tmp_path)
    want = _docs(corpus_chunks(sources, chunk_size=7))
    assert len(want) == 120 + 90 + 70 + 150
    for n in (1, 2, 3, 5, 8, 13):
        parts = _parts(sources, n)
        assert len(parts) == n
        got = [_docs(p.chunks(5)) for part in parts for p in part]
        assert [d for piece in got for d in piece] == want, n
        sizes = [sum(len(_docs(p.chunks())) for p in part) for part in parts]
        assert sum(sizes) == len(want) and (n > 4 or min(sizes) > 0)
    for one in sources:  # each kind alone, cut in three
        assert [d for part in _parts(one, 3) for p in part for d in _docs(p.chunks(4))] == _docs(corpus_chunks(one))


def test_a_broken_line_in_a_later_part_is_named_by_its_line_in_the_file(tmp_path: Path) -> None:
    lines = [json.dumps({"_id": f"d{i}", "text": f"word{i} x"}) for i in range(60)]
    lines[47] = '{"_id": "d47", "text": '
    (tmp_path / "c.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(FrameValidationError) as whole:
        list(corpus_chunks(tmp_path / "c.jsonl"))
    parts = _parts(tmp_path / "c.jsonl", 4)
    failing = [p for part in parts for p in part if p.start > 0 and p.start <= (tmp_path / "c.jsonl").stat().st_size]
    errors = []
    for piece in failing:
        try:
            list(piece.chunks())
        except FrameValidationError as exc:
            errors.append(str(exc))
    assert errors == [str(whole.value)] and ":48: invalid JSON" in errors[0]


def test_bad_sources_are_refused_before_any_part_is_read(tmp_path: Path) -> None:
    with pytest.raises(KolmTypeError, match="a path or a list of paths"):
        corpus_files(pd.DataFrame({"id": ["a"], "content": ["x"]}))
    with pytest.raises(KolmValueError, match="does not exist"):
        corpus_files([tmp_path / "nothing.jsonl"])
    (tmp_path / "x.csv").write_text("id,content\n")
    with pytest.raises(KolmValueError, match="a corpus file is"):
        corpus_files(str(tmp_path / "x.csv"))
    pd.DataFrame({"key": ["a"], "body": ["x"]}).to_parquet(tmp_path / "bad.parquet")
    with pytest.raises(FrameValidationError, match="lacks column"):
        corpus_files(tmp_path / "bad.parquet")
