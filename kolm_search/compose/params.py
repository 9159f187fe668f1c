"""Parameters of stages in scikit-learn's manner: ``get_params()``, ``set_params(**kw)`` with
nested ``name__param`` names through operators, and the fingerprint made of them.

A stage declares :meth:`Parameters.stage_params` (the values that determine its output, by
name; nested stages among them) and :meth:`Parameters.apply_params` (how it takes new
values: checked as its constructor checks them, all or nothing). An index adds
:meth:`Parameters.stage_identity` (its documents' digest and revision).
"""

from __future__ import annotations

from typing import Any

from kolm_search.compose.fingerprints import describe
from kolm_search.errors import KolmTypeError, KolmValueError

__all__ = ["Parameters", "merged_params"]


def merged_params(stage: Parameters, changes: dict[str, Any], *, fixed: str = "") -> dict[str, Any]:
    """``stage``'s :meth:`~Parameters.stage_params` with ``changes`` over them (what an
    ``apply_params`` that rebuilds the stage passes to its constructor).

    Raises
    ------
    KolmValueError
        A name in ``changes`` the stage does not have, listing the ones it has (and, when given,
        what is ``fixed`` at construction).
    """
    own = stage.stage_params()
    unknown = sorted(set(changes) - set(own))
    if unknown:
        also = f" ({fixed} is fixed: build a new one for another)" if fixed else ""
        raise KolmValueError(f"{type(stage).__name__} has no parameter(s) {unknown}; it has {sorted(own)}{also}")
    return {**own, **changes}


class Parameters:
    """The parameter protocol of :class:`~kolm_search.compose.Stage` (see the module doc)."""

    def stage_params(self) -> dict[str, Any]:
        """The parameters that determine the output, by name (scikit-learn's ``get_params(deep=False)``)."""
        return {}

    def apply_params(self, changes: dict[str, Any]) -> None:
        """Set some of :meth:`stage_params` (checked as the constructor checks them)."""
        if changes:
            raise KolmValueError(f"{type(self).__name__} has no settable parameters {sorted(changes)}")

    def stage_identity(self) -> str:
        """What else the output depends on (an index: its documents' digest and revision)."""
        return ""

    def components(self) -> list[Any]:
        """What this stage is made of, for what walks a pipeline (its indexes merged before a
        search, their revisions keying a client's response cache): the stages among its
        parameters; a wrapper gives what it wraps (:func:`~kolm_search.compose.as_stage`: the
        user's object)."""
        return [value for value in self.stage_params().values() if isinstance(value, Parameters)]

    # -- provided -----------------------------------------------------------------------------
    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The parameters by name; with ``deep``, those of nested stages too, as ``name__param``."""
        own = self.stage_params()
        out = dict(own)
        if deep:
            for name, value in own.items():
                if isinstance(value, Parameters):
                    out.update({f"{name}__{k}": v for k, v in value.get_params(deep=True).items()})
        return out

    def set_params(self, **params: Any) -> Parameters:
        """Set parameters (nested as ``name__param``) in place, all or nothing (a refused value
        leaves every one as it was); returns the stage. Unknown names raise ``KolmValueError``
        listing the valid ones."""
        own = self.stage_params()
        mine: dict[str, Any] = {}
        nested: dict[str, dict[str, Any]] = {}
        for key, value in params.items():
            name, _, rest = key.partition("__")
            if name not in own:
                raise KolmValueError(f"{type(self).__name__} has no parameter {name!r}; it has {sorted(own)}")
            if rest:
                if not isinstance(own[name], Parameters):
                    raise KolmValueError(f"{type(self).__name__}.{name} is not a stage: {key!r} cannot be set")
                nested.setdefault(name, {})[rest] = value
            else:
                mine[key] = value
        done: list[tuple[Parameters, dict[str, Any]]] = []  # what was set, with the old values
        try:
            self.apply_params(mine)
            now = self.stage_params()  # what changed, given or not (a fusion's ``params`` carry its k and weights)
            done.append((self, {k: v for k, v in own.items() if k in mine or now.get(k) is not v}))
            for name, sub in nested.items():
                child = self.stage_params()[name]
                was = child.get_params()
                child.set_params(**sub)
                done.append((child, {k: was[k] for k in sub}))
        except Exception:  # all or nothing: a refused value undoes the ones set before it
            for stage, old in reversed(done):
                if stage is not self:
                    stage.set_params(**old)
                elif old:
                    self.apply_params(old)
            raise
        return self

    def fingerprint(self) -> str:
        """What determines the output: the class, every parameter's fingerprint and
        :meth:`stage_identity`; a parameter that declares no fingerprint raises ``KolmTypeError``."""
        params = list(self.stage_params().items())
        identity = self.stage_identity()
        if not params and not identity:
            raise KolmTypeError(f"{type(self).__name__} declares neither parameters nor a fingerprint(), so its "
                                "output cannot be shared or cached")
        return describe(type(self).__name__, params + ([("index", identity)] if identity else []),
                        what=type(self).__name__)
