"""Learning to rank: LightGBM's LambdaMART over the features of a feature union (extra ``ltr``).

``LTRReranker((bm25 % 100) ** BM25Score(bm25) ** DenseScore(dense) ** DocumentLength())`` is a
retrieving stage: it runs its ``features`` stage (any retrieving stage; a frame without
``features`` gives its score as the one feature), scores every candidate with a LambdaMART
model trained by :meth:`LTRReranker.fit` on judged queries, and orders each query's candidates
by that score (ties by the features stage's rank) -- PyTerrier's
``(bm25 % 100) >> features >> pt.ltr.apply_learned_model(...)``
fitted with ``pipe.fit(topics, qrels)``.

The learner is seeded and deterministic (``seed``, ``deterministic=True``, a fixed
``num_threads``): two fits on the same data give the same model. The stage's fingerprint
holds a digest of the trained model, so a run cached for one model is never reused for
another (nor for an unfitted stage, which refuses to run).

:func:`cross_validated_run` is K-fold cross-validation over queries: fit on the other folds'
queries and judgements, rank the held-out fold, concatenate the held-out runs.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from kolm_search._extras import require
from kolm_search.compose.queries import prepare_queries
from kolm_search.compose.runner import run_stage, stage_name
from kolm_search.compose.stage import Composed, Stage
from kolm_search.engine.candidate_frame import CandidateFrame, QueryBatch
from kolm_search.errors import KolmError, KolmTypeError, KolmValueError
from kolm_search.retrievers.ltr_norm import QUERY_NORMS, normalise_per_query

__all__ = ["FIT_DEPTH", "LTRReranker", "cross_validated_run"]

#: Candidates per query asked of the features stage, when fitting and when ranking alike (a
#: ``% k`` inside it asks its retriever for ``k``): a feature of a stage on the right of ``**``
#: (a retriever's score, 0 for a document it did not return) must not depend on the page asked.
FIT_DEPTH = 1000

_OWN = ("n_estimators", "num_leaves", "learning_rate", "min_data_in_leaf", "seed", "num_threads", "params",
        "query_norm", "valid_fraction", "start_from", "start_weight")


def _lightgbm() -> Any:
    return require("lightgbm", "ltr")


def _positive(owner: str, name: str, value: Any, kind: type = int) -> Any:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
    if kind is int:
        ok = ok and isinstance(value, int)
    if not ok:
        raise KolmValueError(f"{owner}.{name} must be a positive {kind.__name__}, got {value!r}")
    return value


class LTRReranker(Composed):
    """LambdaMART over the features of ``features`` (see the module doc).

    Parameters
    ----------
    features : Stage
        A retrieving stage whose candidates carry the features (``(a % k) ** b ** c``).
    n_estimators : int, default 200
        Boosting rounds.
    num_leaves, learning_rate, min_data_in_leaf : default 3, 0.02, 100
        LightGBM's tree settings. The defaults (with ``query_norm="minmax"`` and
        ``start_from=0``) are the most regularised of those tried on the four development
        collections (``benchmarks/bench_ltr_grid.py``, ``bench_ltr_pool.py``; chosen again by
        leave-one-collection-out with the features of
        :func:`~kolm_search.recipes.ltr_union.hybrid_features`, ``bench_ltr_features.py``): with
        30-300 judged queries, bigger trees fit the training queries, not the collection.
    seed : int, default 0
        Seeds every random choice of the learner.
    num_threads : int, default 1
        LightGBM's threads (fixed, so the model does not depend on the machine).
    params : dict, optional
        More LightGBM parameters (e.g. ``{"lambdarank_truncation_level": 20}``).
    query_norm : str, default "minmax"
        How each feature is normalised within each query's candidates before fitting and
        ranking alike (:data:`~kolm_search.retrievers.ltr_norm.QUERY_NORMS`).
    valid_fraction : float, default 0
        In ``[0, 1)``: when :meth:`fit` is given no ``valid`` queries, this share of the
        training queries (drawn with ``seed``) is held out of the fit to stop early on
        (nDCG@10, 20 rounds without gain); 0 fits every round on every query.
    start_from : int or None, default 0
        A feature column (e.g. a baseline's score) whose per-query min-max, times
        ``start_weight``, is the model's initial score: the trees learn corrections to that
        ranking instead of a ranking from nothing. The default, column 0, is the features
        stage's own score (its candidates' ranking); None starts from nothing.
    start_weight : float, default 1
    """

    names = ("features",)
    symbol = "ltr"

    def __init__(self, features: Stage, *, n_estimators: int = 200, num_leaves: int = 3,
                 learning_rate: float = 0.02, min_data_in_leaf: int = 100, seed: int = 0, num_threads: int = 1,
                 params: dict[str, Any] | None = None, query_norm: str = "minmax", valid_fraction: float = 0.0,
                 start_from: int | None = 0, start_weight: float = 1.0) -> None:
        if not isinstance(features, Stage) or not features.is_source:
            raise KolmTypeError(f"LTRReranker.features must be a retrieving stage, got {stage_name(features)}")
        self._own: dict[str, Any] = {}
        super().__init__(features)
        self.booster: Any = None
        self.n_features: int | None = None
        self._digest = "unfitted"
        self._set_own({"n_estimators": n_estimators, "num_leaves": num_leaves, "learning_rate": learning_rate,
                       "min_data_in_leaf": min_data_in_leaf, "seed": seed, "num_threads": num_threads,
                       "params": dict(params or {}), "query_norm": query_norm, "valid_fraction": valid_fraction,
                       "start_from": start_from, "start_weight": start_weight})

    # -- parameters ---------------------------------------------------------------------------
    def _set_own(self, changes: dict[str, Any]) -> None:
        new = {**self._own, **changes}
        if set(new) != set(_OWN):
            raise KolmValueError(f"LTRReranker has no parameters {sorted(set(new) - set(_OWN))}")
        for name in ("n_estimators", "num_leaves", "min_data_in_leaf", "num_threads"):
            _positive("LTRReranker", name, new[name])
        _positive("LTRReranker", "learning_rate", new["learning_rate"], float)
        if isinstance(new["seed"], bool) or not isinstance(new["seed"], int):
            raise KolmTypeError(f"LTRReranker.seed must be an int, got {new['seed']!r}")
        if not isinstance(new["params"], dict):
            raise KolmTypeError(f"LTRReranker.params must be a dict, got {type(new['params']).__name__}")
        if new["query_norm"] not in QUERY_NORMS:
            raise KolmValueError(f"LTRReranker.query_norm must be one of {QUERY_NORMS}, got {new['query_norm']!r}")
        vf = new["valid_fraction"]
        if isinstance(vf, bool) or not isinstance(vf, (int, float)) or not 0 <= vf < 1:
            raise KolmValueError(f"LTRReranker.valid_fraction must be a number in [0, 1), got {vf!r}")
        start = new["start_from"]
        if start is not None and (isinstance(start, bool) or not isinstance(start, int) or start < 0):
            raise KolmValueError(f"LTRReranker.start_from must be a feature column (int >= 0) or None, got {start!r}")
        _positive("LTRReranker", "start_weight", new["start_weight"], float)
        self._own = new

    def stage_params(self) -> dict[str, Any]:
        return {**super().stage_params(), **self._own}

    def apply_params(self, changes: dict[str, Any]) -> None:
        own = {k: changes[k] for k in changes if k in _OWN}
        if own:
            self._set_own(own)
        rest = {k: v for k, v in changes.items() if k not in _OWN}
        if rest:
            super().apply_params(rest)

    def stage_identity(self) -> str:
        """The trained model's digest (``"unfitted"`` before :meth:`fit`)."""
        return f"model:{self._digest}"

    def lightgbm_params(self) -> dict[str, Any]:
        """The parameters given to ``lightgbm.train``."""
        o = self._own
        return {"objective": "lambdarank", "metric": "ndcg", "eval_at": [10], "num_leaves": o["num_leaves"],
                "learning_rate": o["learning_rate"], "min_data_in_leaf": o["min_data_in_leaf"], "seed": o["seed"],
                "deterministic": True, "force_row_wise": True, "num_threads": o["num_threads"], "verbosity": -1,
                **o["params"]}

    # -- training -----------------------------------------------------------------------------
    def _frames(self, queries: Any) -> tuple[npt.NDArray[np.float64], pd.DataFrame]:
        """The features of every candidate of ``queries`` and their ``qid, doc_id, group`` rows."""
        stage = self.operands[0]
        table = stage.table  # type: ignore[attr-defined]
        prepared = prepare_queries(queries, limit=FIT_DEPTH)
        mats, keys = [], []
        for rows, contexts, _, _ in prepared.groups:
            batch = QueryBatch.from_contexts(contexts, limit=max(1, min(FIT_DEPTH, len(table))))
            frame = run_stage(stage, replace(batch, table=table), None)
            mats.append(self._matrix(frame, check_width=False))
            q = rows[frame.query]
            keys.append(pd.DataFrame({"qid": [str(prepared.qids[i]) for i in q],
                                      "doc_id": np.asarray(table.ids_of(frame.doc), dtype=object).astype(str),
                                      "group": q}))
        return np.vstack(mats), pd.concat(keys, ignore_index=True)

    def candidate_features(self, queries: Any) -> tuple[npt.NDArray[np.float64], pd.DataFrame]:
        """The raw features (n, f) of every candidate of ``queries`` and their ``qid, doc_id,
        group`` rows (grouped by query): what :meth:`fit` learns from, computed once to try
        several settings (``cross_validated_run(..., features=)``)."""
        return self._frames(queries)

    def fit(self, queries: Any, qrels: pd.DataFrame, valid: tuple[Any, pd.DataFrame] | None = None) -> LTRReranker:
        """Train the model on ``queries`` (any form ``search_batch`` takes; ids as the qrels')
        and their judgements ``qrels`` (``qid, doc_id, relevance``; unjudged candidates are
        0, negative grades 0). ``valid``: ``(queries, qrels)`` to stop early on (nDCG@10,
        20 rounds without gain). Returns the stage."""
        X, keys = self._frames(queries)
        return self._fit_rows(X, keys, qrels, None if valid is None else (*self._frames(valid[0]), valid[1]))

    def _fit_rows(self, X: npt.NDArray[np.float64], keys: pd.DataFrame, qrels: pd.DataFrame,
                  valid: tuple[npt.NDArray[np.float64], pd.DataFrame, pd.DataFrame] | None) -> LTRReranker:
        """Train on feature rows ``X`` of the candidates ``keys`` (``qid, doc_id, group``)."""
        lgb = _lightgbm()
        if not len(X):
            raise KolmValueError(f"{stage_name(self)}.fit: the features stage gave no candidates to learn from")
        self._check_start(X)
        if valid is None and self._own["valid_fraction"] > 0:
            (X, keys), held = self._inner_split(X, keys)
            valid = None if held is None else (*held, qrels)
        group = keys["group"].to_numpy()
        train = lgb.Dataset(self._inputs(X, group), label=_labels(keys, qrels), group=_groups(keys),
                            init_score=self._start(X, group), free_raw_data=False)
        sets, callbacks = [], []
        if valid is not None:
            vx, vkeys, vqrels = valid
            vgroup = vkeys["group"].to_numpy()
            sets = [lgb.Dataset(self._inputs(vx, vgroup), label=_labels(vkeys, vqrels), group=_groups(vkeys),
                                init_score=self._start(vx, vgroup), reference=train)]
            callbacks = [lgb.early_stopping(20, verbose=False)]
        self.booster = lgb.train(self.lightgbm_params(), train, num_boost_round=self._own["n_estimators"],
                                 valid_sets=sets, callbacks=callbacks)
        self.n_features = int(X.shape[1])
        text = self.booster.model_to_string(num_iteration=-1)
        self._digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:24]
        return self

    def _inner_split(self, X: npt.NDArray[np.float64], keys: pd.DataFrame) -> tuple[
            tuple[npt.NDArray[np.float64], pd.DataFrame], tuple[npt.NDArray[np.float64], pd.DataFrame] | None]:
        """``valid_fraction`` of the training queries (seeded) apart, to stop early on."""
        qids = np.asarray(pd.unique(keys["qid"]), dtype=object)
        n_valid = round(self._own["valid_fraction"] * len(qids))
        if n_valid < 1 or n_valid >= len(qids):
            return (X, keys), None
        rng = np.random.default_rng(self._own["seed"])
        held = keys["qid"].isin(set(rng.choice(qids, size=n_valid, replace=False))).to_numpy()
        return ((X[~held], keys[~held].reset_index(drop=True)),
                (X[held], keys[held].reset_index(drop=True)))

    def _check_start(self, X: npt.NDArray[np.float64]) -> None:
        start = self._own["start_from"]
        if start is not None and start >= X.shape[1]:
            raise KolmValueError(f"{stage_name(self)}.start_from={start}: the features stage gives {X.shape[1]} "
                                 "features")

    def _inputs(self, X: npt.NDArray[np.float64], group: npt.NDArray[Any]) -> npt.NDArray[np.float64]:
        """The model's inputs: ``X`` normalised per query (``query_norm``)."""
        return normalise_per_query(X, group, self._own["query_norm"])

    def _start(self, X: npt.NDArray[np.float64], group: npt.NDArray[Any]) -> npt.NDArray[np.float64] | None:
        """The initial score of each row (``start_from``), or None."""
        start = self._own["start_from"]
        if start is None:
            return None
        return self._own["start_weight"] * normalise_per_query(X[:, [start]], group, "minmax")[:, 0]

    def _predict(self, X: npt.NDArray[np.float64], group: npt.NDArray[Any]) -> npt.NDArray[np.float64]:
        """The model's score of feature rows ``X`` of queries ``group`` (its start included)."""
        if not len(X):
            return np.zeros(0, np.float64)
        score = np.asarray(self.booster.predict(self._inputs(X, group), num_threads=self._own["num_threads"]),
                           dtype=np.float64)
        start = self._start(X, group)
        return score if start is None else score + start

    # -- ranking ------------------------------------------------------------------------------
    def _matrix(self, frame: CandidateFrame, *, check_width: bool = True) -> npt.NDArray[np.float64]:
        x = frame.score.astype(np.float64)[:, None] if frame.features is None else frame.features
        if x.ndim != 2 or not np.issubdtype(x.dtype, np.floating):
            raise KolmValueError(f"{stage_name(self)}: features must be a 2-D float matrix, got {x.dtype} {x.shape}")
        if check_width and x.shape[1] != self.n_features:
            raise KolmValueError(f"{stage_name(self)}: the features stage gives {x.shape[1]} features; the model "
                                 f"was fitted on {self.n_features}")
        return x

    def _asked(self, batch: QueryBatch) -> QueryBatch:
        """The batch the features stage is asked for: ``FIT_DEPTH`` deep (at most the table's size)."""
        table = batch.table if batch.table is not None else self.operands[0].table  # type: ignore[attr-defined]
        return replace(batch, limit=max(1, min(FIT_DEPTH, len(table))))

    def asks(self, batch: QueryBatch) -> list[tuple[Stage, QueryBatch]]:
        return [(self.operands[0], self._asked(batch))]

    def transform(self, batch: QueryBatch, candidates: CandidateFrame | None) -> CandidateFrame:
        if self.booster is None:
            raise KolmError(f"{stage_name(self)}: the model is not trained; call fit(queries, qrels) first")
        frame = run_stage(self.operands[0], self._asked(batch), candidates)
        x = self._matrix(frame)
        score = self._predict(x, frame.query)
        order = np.lexsort((frame.rank, -score, frame.query))
        query = frame.query[order]
        counts = np.bincount(query, minlength=frame.n_queries)
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        rank = (np.arange(len(query)) - np.repeat(starts, counts)).astype(np.int32)
        return CandidateFrame(query=query, doc=frame.doc[order], score=score[order], rank=rank,
                              n_queries=frame.n_queries, features=x[order])

    def __repr__(self) -> str:
        return f"LTRReranker({self.operands[0]!r})"


def _labels(keys: pd.DataFrame, qrels: pd.DataFrame) -> npt.NDArray[np.int64]:
    """Each candidate's grade in ``qrels`` (0 when unjudged or negative)."""
    judged = qrels.astype({"qid": str, "doc_id": str}).drop_duplicates(["qid", "doc_id"], keep="last")
    merged = keys[["qid", "doc_id"]].merge(judged[["qid", "doc_id", "relevance"]], on=["qid", "doc_id"], how="left")
    return merged["relevance"].fillna(0).clip(lower=0).to_numpy().astype(np.int64)


def _groups(keys: pd.DataFrame) -> npt.NDArray[np.int64]:
    """The candidates per query, in the order they come (grouped by query)."""
    g = keys["group"].to_numpy()
    if len(g) and np.any(np.diff(g) < 0):
        raise KolmValueError("LTRReranker.fit: candidates are not grouped by query")
    return np.unique(g, return_counts=True)[1].astype(np.int64)


def cross_validated_run(stage: LTRReranker, queries: pd.DataFrame, qrels: pd.DataFrame, *, folds: int = 5,
                        seed: int = 0, limit: int = 100,
                        features: tuple[npt.NDArray[np.float64], pd.DataFrame] | None = None,
                        extra: tuple[npt.NDArray[np.float64], pd.DataFrame, pd.DataFrame] | None = None
                        ) -> pd.DataFrame:
    """The run (``qid, doc_id, rank, score``) of ``queries`` (``qid, query``) where each query is
    ranked by a model fitted on the other folds only (their queries and their judgements),
    ``folds`` disjoint folds of :func:`~kolm_search.evaluation.make_folds` (``seed``);
    ``limit`` results per query.

    The features of every query's candidates are computed once (a query's candidates and
    features do not depend on the other queries of its batch) and each fold's model scores its
    held-out rows, as ``stage(held_out, limit=limit)`` would. The stage is left fitted on the
    last fold's training queries. ``features``: :meth:`LTRReranker.candidate_features` of
    ``queries`` computed before (by a stage with the same features stage). ``extra``: more
    training rows ``(X, keys, qrels)`` added to every fold's (e.g. other collections'
    candidates, their features and judgements; their qids must differ from ``queries``'s).
    """
    from kolm_search.evaluation import make_folds

    if not isinstance(stage, LTRReranker):
        raise KolmTypeError(f"cross_validated_run takes an LTRReranker, got {stage_name(stage)}")
    X, keys = stage._frames(queries) if features is None else features
    judged_qid = qrels["qid"].astype(str)
    if extra is not None:
        ex, ekeys, eqrels = extra
        if ekeys["qid"].isin(set(keys["qid"])).any():
            raise KolmValueError("cross_validated_run: the extra training rows share qids with the queries")
        ekeys = ekeys.assign(group=ekeys["group"].to_numpy() + (int(keys["group"].max()) + 1 if len(keys) else 0))
    runs = []
    for held_out in make_folds(list(queries["qid"].astype(str)), folds, seed=seed):
        test = keys["qid"].isin(held_out).to_numpy()
        tx, tkeys, tqrels = X[~test], keys[~test].reset_index(drop=True), qrels[~judged_qid.isin(held_out)]
        if extra is not None:
            tx, tkeys = np.vstack([tx, ex]), pd.concat([tkeys, ekeys], ignore_index=True)
            tqrels = pd.concat([tqrels, eqrels], ignore_index=True)
        stage._fit_rows(tx, tkeys, tqrels, None)
        part = keys.loc[test, ["qid", "doc_id", "group"]].copy()
        part["score"] = stage._predict(X[test], part["group"].to_numpy())
        part["_order"] = np.arange(len(part))  # the features stage's rank breaks ties
        part = part.sort_values(["group", "score", "_order"], ascending=[True, False, True], kind="stable")
        part["rank"] = part.groupby("group").cumcount()
        runs.append(part[part["rank"] < limit])
    out = pd.concat(runs, ignore_index=True).sort_values(["group", "rank"], kind="stable")
    return out[["qid", "doc_id", "rank", "score"]].reset_index(drop=True)
