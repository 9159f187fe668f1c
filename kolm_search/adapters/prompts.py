"""The prompts of the LLM rerankers: one template each, documented here, replaceable.

A :class:`PromptTemplate` is a system message and a user message with ``{placeholders}``
filled by :meth:`str.format` (write ``{{`` and ``}}`` for literal braces). Each reranker fills
its own set and refuses a template that names any other:

=========================  ============================================  =======================
template                   placeholders                                  the model answers
=========================  ============================================  =======================
:data:`POINTWISE_GRADE`    ``query``, ``document``, ``low``, ``high``    a grade, e.g. ``2``
:data:`POINTWISE_YES_NO`   ``query``, ``document``                       ``yes`` or ``no``
:data:`LISTWISE`           ``query``, ``passages``, ``n``                ``[2] > [1] > [3]``
=========================  ============================================  =======================

``passages`` is the window's documents, one per line as ``[i] text`` (``i`` from 1). A
replacement must ask for the same kind of answer, since that is what the reranker parses. The
template is part of the reranker's fingerprint: a new wording is a new model for the score
cache and for resumable jobs.
"""

from __future__ import annotations

import string
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from kolm_search.errors import KolmTypeError, KolmValueError

__all__ = ["LISTWISE", "POINTWISE_GRADE", "POINTWISE_YES_NO", "PromptTemplate"]


@dataclass(frozen=True)
class PromptTemplate:
    """A system and a user message with ``{placeholders}``.

    Parameters
    ----------
    system : str
        The system message (may be empty: then only the user message is sent).
    user : str
    """

    system: str
    user: str

    def check(self, fields: Collection[str], what: str) -> PromptTemplate:
        """This template, after checking that it parses and names only ``fields``; returns self."""
        if not isinstance(self.system, str) or not isinstance(self.user, str):
            raise KolmTypeError(f"{what}: a PromptTemplate's system and user must be strings")
        for name, text in (("system", self.system), ("user", self.user)):
            try:
                used = {f for _, f, _, _ in string.Formatter().parse(text) if f is not None}
            except ValueError as exc:
                raise KolmValueError(f"{what}: the {name} message is not a valid template ({exc}); "
                                     "write {{ and }} for literal braces") from exc
            unknown = sorted(u for u in used if u not in fields)
            if unknown:
                raise KolmValueError(f"{what}: the {name} message names {unknown}; it may use only "
                                     f"{sorted(fields)}")
        if not self.user.strip():
            raise KolmValueError(f"{what}: the user message is empty")
        return self

    def messages(self, **values: Any) -> list[dict[str, str]]:
        """The chat messages with ``values`` filled in."""
        user = {"role": "user", "content": self.user.format(**values)}
        return [{"role": "system", "content": self.system.format(**values)}, user] if self.system else [user]


#: Pointwise grading: the model answers a number from ``low`` to ``high``.
POINTWISE_GRADE = PromptTemplate(
    system="You judge how relevant a document is to a search query.",
    user=("Query: {query}\n\nDocument: {document}\n\n"
          "On a scale from {low} (not relevant) to {high} (perfectly relevant), how relevant is the document to "
          "the query? Answer with the number only."),
)

#: Pointwise yes/no: scored by the probability of "yes" when the server returns log-probabilities.
POINTWISE_YES_NO = PromptTemplate(
    system="You judge whether a document is relevant to a search query.",
    user="Query: {query}\n\nDocument: {document}\n\nIs the document relevant to the query? Answer yes or no.",
)

#: Listwise: the model orders the window's passages, most relevant first.
LISTWISE = PromptTemplate(
    system="You order passages by how relevant they are to a search query.",
    user=("Below are {n} passages, each with an identifier in brackets.\n\n{passages}\n\n"
          "Query: {query}\n\n"
          "Order all {n} passages from most to least relevant to the query. Answer only with the identifiers, "
          "like [2] > [1] > [3], and nothing else."),
)
