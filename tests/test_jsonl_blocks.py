"""The block reader of JSONL corpora (Arrow's JSON parser where it reads as the lines do) against
the line-by-line reader: the same chunks (documents, line numbers, cuts) or the same error, for
any mix of good and bad lines and any block size."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kolm_search.errors import FrameValidationError
from kolm_search.io import jsonl_blocks
from kolm_search.io.corpus_stream import jsonl_chunks
from kolm_search.retrievers.bm25 import BM25Retriever

FAST = [  # blocks of these lines are parsed by Arrow
    '{"_id": "d%d", "title": "", "text": "apple sea"}',
    '{"_id": "d%d", "title": "Sea", "text": "ships of the river"}',
    '{"_id": "d%d", "text": "no title"}',
    '{"_id": "d%d", "title": null, "text": ""}',
    '{"_id": "d%d", "text": "caf\\u00e9 \\u6771\\u4eac", "metadata": {}}',
    '{"_id": "d%d", "text": "a\\u0000b", "extra": [1, 2], "score": 1.5}',
    '{"_id": "d%d", "text": "2020-01-01", "title": "2021-02-02"}',
    '  {"_id": "d%d", "text": "leading space"}  ',
    '{"_id": "d%d", "text": "crlf"}\r',
    '{"_id": "d%d", "text": "\u00dcn\u00efc\u00f6d\u00e9 raw \u6771"}',
]
GOOD = [*FAST,  # and these, read line by line, are kept too
        '{"_id": %d, "title": "int id", "text": "pear"}',
        '{"_id": "d%d", "text": "emoji \\ud83d\\ude00 pair"}',
        '{"_id": "d%d", "text": "tab\\tand \\"quote\\"", "metadata": "not a dict"}']
ODD = [  # read by the line reader: kept, or refused by name
    '{"_id": "d%d", "text": "meta", "metadata": {"year": 2020}}',
    '{"_id": "d%d", "text": "nan", "x": NaN}',
    '{"_id": %d0000000000000000000000000, "text": "big id"}',
    '',
    '   ',
    '\ufeff{"_id": "d%d", "text": "bom"}',
    '{"_id": "d%d", "text": "lone \\ud800 surrogate"}',
    '{"_id": "d%d", "text": "x", "text": "dup key"}',
    '{"_id": "d%d", "text": "broken',
    '{"_id": true, "text": "bool id %d"}',
    '{"_id": "", "text": "empty id %d"}',
    '{"_id": "d%d", "text": 5}',
    '{"_id": "d%d", "title": 3, "text": "x"}',
    '{"text": "no id %d"}',
    '[%d]',
    '{"_id": "d%d", "text": "raw\tcontrol"}',
    '{"_id": "dup", "text": "duplicate %d"}',
]
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _read(path: Path, size: int | None, chars: int, **span: Any) -> tuple[list[Any], str | None]:
    """The chunks as (documents as the documents file stores them, where, unit, numbers), and the
    error message if reading stopped."""
    out: list[Any] = []
    try:
        for chunk in jsonl_chunks(path, size, chars, **span):
            out.append((chunk.table.to_arrow(), chunk.where, chunk.unit, chunk.numbers.tolist()))
    except FrameValidationError as exc:
        return out, str(exc)
    return out, None


def _same(a: tuple[list[Any], str | None], b: tuple[list[Any], str | None]) -> None:
    assert a[1] == b[1]
    assert len(a[0]) == len(b[0])
    for (fa, wa, ua, na), (fb, wb, ub, nb) in zip(a[0], b[0], strict=True):
        assert (wa, ua, na) == (wb, ub, nb)
        assert fa.equals(fb), (fa.to_pylist(), fb.to_pylist())


def _check(path: Path, size: int | None, chars: int) -> tuple[list[Any], str | None]:
    blocks = _read(path, size, chars)
    lines = _read(path, size, chars, line_range=(1, sys.maxsize))  # a span: the line-by-line reader
    _same(blocks, lines)
    return blocks


@SETTINGS
@given(picks=st.lists(st.tuples(st.booleans(), st.integers(0, 99)), max_size=40), size=st.one_of(st.none(), st.integers(1, 7)),
       chars=st.integers(1, 200), block=st.integers(1, 400), gz=st.booleans(), newline=st.booleans())
def test_blocks_read_as_the_lines_do(tmp_path_factory: Any, monkeypatch: pytest.MonkeyPatch,
                                     picks: list[tuple[bool, int]], size: int | None, chars: int, block: int, gz: bool,
                                     newline: bool) -> None:
    monkeypatch.setattr(jsonl_blocks, "BLOCK_BYTES", block)
    lines = []
    for i, (odd, k) in enumerate(picks):
        pool = ODD if odd else GOOD
        template = pool[k % len(pool)]
        lines.append(template % i if "%d" in template else template)
    data = "\n".join(lines) + ("\n" if newline and lines else "")
    path = tmp_path_factory.mktemp("jsonl") / ("c.jsonl.gz" if gz else "c.jsonl")
    if gz:
        with gzip.open(path, "wb") as fh:
            fh.write(data.encode("utf-8"))
    else:
        path.write_bytes(data.encode("utf-8"))
    _check(path, size, chars)


def test_good_lines_are_read_by_arrow(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fast path is taken for plain BEIR records (else this module would test nothing)."""
    calls: list[int] = []
    real = jsonl_blocks._line_block
    monkeypatch.setattr(jsonl_blocks, "_line_block", lambda *a: calls.append(1) or real(*a))
    path = tmp_path / "c.jsonl"
    path.write_text("".join((t % i if "%d" in t else t) + "\n" for i, t in enumerate(FAST * 5)), encoding="utf-8")
    chunks, error = _check(path, 7, 10_000)
    assert error is None and sum(len(c[0]) for c in chunks) == len(FAST) * 5
    calls.clear()
    _read(path, 7, 10_000)
    assert not calls


def test_invalid_utf8_and_a_truncated_gzip_name_the_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jsonl_blocks, "BLOCK_BYTES", 64)
    good = b"".join(b'{"_id": "d%d", "text": "apple sea and ships"}\n' % i for i in range(200))
    path = tmp_path / "c.jsonl"
    path.write_bytes(good + b'{"_id": "x", "text": "bad \xff byte"}\n' + good[:100])
    assert _check(path, None, 1_000)[1] == f"{path}:201: not UTF-8 text (invalid start byte at byte 26)"
    whole = gzip.compress(good * 5)
    truncated = tmp_path / "t.jsonl.gz"
    truncated.write_bytes(whole[:len(whole) // 2])
    error = _check(truncated, 50, 1_000)[1]
    assert error is not None and error.startswith(f"{truncated}:") and "cannot read the file" in error


def test_a_corpus_of_every_good_line_builds_the_in_memory_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jsonl_blocks, "BLOCK_BYTES", 300)
    rows = [(t % i if "%d" in t else t) for i, t in enumerate(GOOD * 3)]  # Arrow's blocks and the lines' mixed
    path = tmp_path / "c.jsonl"
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    docs = []
    for line in rows:
        obj = json.loads(line)
        meta = obj.get("metadata")
        docs.append({"id": str(obj["_id"]), "content": obj["text"], "title": obj.get("title") or None,
                     "metadata": meta if isinstance(meta, dict) and meta else None})
    BM25Retriever(docs).save(tmp_path / "oracle")
    oracle = BM25Retriever.load(tmp_path / "oracle", mmap=False)  # the documents as a saved index holds them
    built = BM25Retriever.build(path, tmp_path / "ix", chunk_size=4, progress=False)
    assert built.vocab == oracle.vocab
    for name in ("t_ptr", "t_docs", "t_w", "doc_len"):
        assert np.array_equal(np.asarray(getattr(built, name)), np.asarray(getattr(oracle, name))), name
    pd.testing.assert_frame_equal(built.table.frame, oracle.table.frame)


TOKENS = [b"\n", b"\r\n", b"\r", b'"', b"\\", b"{", b"}", b",", b":", b" ", b"\t", b"\x00", b"\xff", b"\xc3", b"\xef\xbb\xbf",
          b"\\u", b"\\ud800", b"\\udc00", b"null", b"1", b'"_id"', b'"text"', b'"title"', b"\xe6\x9d\xb1", b"[", b"]"]


@SETTINGS
@given(seed=st.lists(st.integers(0, 99), min_size=1, max_size=12),
       edits=st.lists(st.tuples(st.floats(0, 1), st.integers(0, 2), st.sampled_from(TOKENS), st.integers(1, 4)),
                      max_size=6),
       size=st.one_of(st.none(), st.integers(1, 5)), block=st.integers(1, 300), gz=st.booleans())
def test_blocks_read_byte_mutations_as_the_lines_do(tmp_path_factory: Any, monkeypatch: pytest.MonkeyPatch,
                                                    seed: list[int], edits: list[tuple[float, int, bytes, int]],
                                                    size: int | None, block: int, gz: bool) -> None:
    """Good lines mutated byte by byte (bytes inserted, replaced or deleted anywhere, newlines
    and bad UTF-8 among them): the block reader keeps what the line reader keeps, or stops with
    its message (file and line), never another error."""
    monkeypatch.setattr(jsonl_blocks, "BLOCK_BYTES", block)
    data = bytearray("".join((GOOD[k % len(GOOD)] % i) + "\n" for i, k in enumerate(seed)).encode("utf-8"))
    for where, op, token, span in edits:
        at = min(int(where * len(data)), len(data))
        if op == 0:  # insert
            data[at:at] = token
        elif op == 1:  # replace
            data[at:at + span] = token
        else:  # delete
            del data[at:at + span]
    path = tmp_path_factory.mktemp("jsonl") / ("c.jsonl.gz" if gz else "c.jsonl")
    path.write_bytes(gzip.compress(bytes(data)) if gz else bytes(data))
    _check(path, size, 300)


@pytest.mark.parametrize("first", [b"null", b"  null", b'null{"_id": "d0", "text": "x"}', b"1", b"[]"])
def test_a_first_value_not_an_object_names_the_line(tmp_path: Path, first: bytes) -> None:
    """pyarrow's JSON reader crashes the process on a block opening with ``null``: such a block
    goes to the line reader, which names the line."""
    path = tmp_path / "c.jsonl"
    path.write_bytes(first + b'\n{"_id": "d1", "text": "apple"}\n')
    error = _check(path, None, 1_000)[1]
    assert error is not None and error.startswith(f"{path}:1: ")
