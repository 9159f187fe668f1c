"""Offline evaluation: trec_eval-exact metrics, significance tests, experiments, fusion tuning,
cross-validation (over queries, and leave one collection out), run-to-run agreement, precision-recall curves."""

from kolm_search.evaluation.agreement import compare_runs, rbo
from kolm_search.evaluation.compare import compare, paired_test, per_query_table
from kolm_search.evaluation.crossval import CrossValidation, cross_validate, grid_points, make_folds
from kolm_search.evaluation.curves import precision_recall_curve
from kolm_search.evaluation.experiment import Experiment
from kolm_search.evaluation.grid import GridSearch, grid_search
from kolm_search.evaluation.loco import LeaveOneCollectionOut, collection_runs, leave_one_collection_out
from kolm_search.evaluation.metrics import evaluate, parse_metric
from kolm_search.evaluation.optimize import optimize_fusion
from kolm_search.evaluation.runner import run_queries

__all__ = [
    "CrossValidation",
    "Experiment",
    "GridSearch",
    "LeaveOneCollectionOut",
    "collection_runs",
    "compare",
    "compare_runs",
    "cross_validate",
    "evaluate",
    "grid_points",
    "grid_search",
    "leave_one_collection_out",
    "make_folds",
    "optimize_fusion",
    "paired_test",
    "parse_metric",
    "per_query_table",
    "precision_recall_curve",
    "rbo",
    "run_queries",
]
