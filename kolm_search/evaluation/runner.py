"""Run a client over a dataset's queries in batches, with a progress bar."""

from __future__ import annotations

from typing import Any

import pandas as pd

__all__ = ["run_queries"]


def run_queries(client: Any, queries: pd.DataFrame, *, limit: int = 100, batch_size: int = 512,
                progress: bool = True, desc: str = "search", **search_kwargs: Any) -> pd.DataFrame:
    """``client.search_batch`` over ``queries`` (``qid, query``) in chunks; the concatenated run.

    Returns the run DataFrame ``qid, doc_id, rank, score``.
    """
    from tqdm.auto import tqdm

    if not {"qid", "query"} <= set(queries.columns):
        raise ValueError(f"queries need columns qid and query; got {list(queries.columns)}")
    parts = []
    with tqdm(total=len(queries), desc=desc, unit="q", disable=not progress, leave=False) as bar:
        for start in range(0, len(queries), batch_size):
            chunk = queries.iloc[start:start + batch_size]
            parts.append(client.search_batch(chunk[["qid", "query"]], limit=limit, **search_kwargs).run)
            bar.update(len(chunk))
    if not parts:
        return pd.DataFrame({"qid": [], "doc_id": [], "rank": [], "score": []})
    return pd.concat(parts, ignore_index=True)
