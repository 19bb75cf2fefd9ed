"""How a Dask call meets the ledger: ``on_exhausted=`` and ``dry_run=`` as on the pandas face.

See ``docs/beyond-one-machine.md`` and ``docs/ledger.md`` ("Previewing a query"). Every
operation of the Dask face validates on the client and runs its first pass on the cluster
(whole users per partition, validated and counted; no noise is drawn and nothing is written),
then hands :func:`settle` a callable ``go`` that reserves through the one driver
(:func:`gpframe.ledger.run.run`) and runs the release tasks. :func:`settle` applies the
pandas face's mechanisms unchanged:

* ``on_exhausted="raise"``: :func:`gpframe.ledger.run.with_on_exhausted` plans ``go`` read-only
  and refuses the query, naming the users who cannot pay, before anything is reserved;
* ``dry_run=True``: :func:`gpframe.results.preview.preview_call` runs ``go`` as a dry run: the
  driver computes the admission read-only, records the planned reservation and stops the call
  before its ``compute``, so no release task is ever submitted to the cluster.

The first pass runs once per call either way (the plan of ``"raise"`` reuses it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpframe.ledger.run import ON_EXHAUSTED, with_on_exhausted

__all__ = ["check_on_exhausted", "settle"]


def check_on_exhausted(value: Any) -> None:
    """Refuse a bad ``on_exhausted=`` with the pandas face's error, before the first pass."""
    if value not in ON_EXHAUSTED:
        with_on_exhausted(lambda **_: None, {"on_exhausted": value})  # raises InvalidInputError


def settle(
    session: Any, operation: str, go: Callable[..., Any], *, on_exhausted: str, dry_run: bool,
    **info: Any,
) -> Any:  # fmt: skip
    """Run ``go()`` (reserve, release, charge) under ``on_exhausted``, or preview it.

    ``info`` is passed to :func:`gpframe.results.preview.preview_call` (``adaptive``,
    ``error``, ``per``, ``per_note``), as the pandas face passes it for the same operation.
    """

    def call() -> Any:
        out = with_on_exhausted(go, {"on_exhausted": on_exhausted})
        return go(on_exhausted="exclude") if out is None else out

    if dry_run:
        from gpframe.results.preview import preview_call

        return preview_call(session, operation, call, **info)
    return call()
