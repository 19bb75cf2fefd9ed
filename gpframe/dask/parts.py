"""``ddf.geopriv(..., partition="region")``: one public metric CRS per part, on the Dask face.

See ``docs/wide-extents.md`` and ``docs/beyond-one-machine.md``. The pandas face splits one
frame by a public column and projects each part with its own public extent; here a dask
partition (holding whole users after the shuffle on the user column) may hold rows of several
parts, and a part's rows lie in several partitions. Every partition therefore splits its own
rows by the column and projects each part with that part's public box (``domain={part:
box}``, one box for all, or a projected metre input CRS); the box, so the metric CRS, depends on
public information only, and the client checks that every partition chose the same CRS for the
same part. The pandas face's fallback to a part's own data extent is refused: each partition
would choose it from its own rows.

The checks that read the column run in the first pass, on the workers, with the pandas face's
rules: a missing value, a part without a box, and a column equal on every row to a function of
the points (:func:`gpframe.queries.partition_check.derived_matches`; the client intersects the
partitions' matches, so a column is refused exactly when it matches on every row of the frame).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from gpframe.errors import GpframeInternalError, InvalidInputError

__all__ = ["Combined", "PartFacts", "Split", "SplitCheck", "StatedCrs", "check_split",
           "combine_split", "split_check", "split_rows"]  # fmt: skip

_NOTHING = "Nothing was charged."


def check_split(
    meta: pd.DataFrame, partition: Any, *, protected: Any, to_crs: Any, domain: Any
) -> tuple[tuple[Any, Any], ...] | None:
    """Validate ``partition=`` on the frame's ``meta`` (no data read), before anything is charged.

    Returns the per-part boxes as (value, box) pairs, or None (one ``domain=`` box, or none).
    """
    from gpframe.geo import _check_domain
    from gpframe.queries.partition_check import refuse

    try:
        known = partition in meta.columns
    except TypeError:
        known = False
    if not known:
        raise InvalidInputError(
            f"partition={partition!r} is not a column of the frame (columns: "
            f"{list(map(str, meta.columns))[:12]}). Name a public column, e.g. "
            f"partition='region'. {_NOTHING}"
        )
    if partition in tuple(protected):
        raise refuse(partition, "it holds the coordinates (or the geometry).")
    if to_crs is not None:
        raise InvalidInputError(
            f"partition={partition!r} with to_crs={to_crs!r}: a split chooses one metric CRS per "
            "part, to_crs= names one for all. Pass one of them (per-part public extents go in "
            f"domain={{part: (lon_min, lat_min, lon_max, lat_max), ...}}). {_NOTHING}"
        )
    if not isinstance(domain, Mapping):
        return None
    for box in domain.values():  # every box now: the parts present are known only later
        _check_domain(box)
    return tuple(domain.items())


@dataclass(frozen=True)
class PartFacts:
    """One part as one dask partition sees it: public facts only."""

    crs_m: str  # as the worker built it (``CRS.srs``), chosen from the part's public box
    scale_max: float
    noise_inflation: float
    n_points: int
    #: ``CRS(crs_m).to_string()``, as the pandas face states it (filled once per part on the
    #: client: the lookup costs a few tenths of a second)
    crs_text: str = ""


@dataclass(frozen=True)
class SplitCheck:
    """The first pass over one partition of a split frame: no noise, nothing written."""

    users: np.ndarray  # distinct users, sorted
    counts: np.ndarray  # int64 points per user
    values: list[Any]  # the parts present, in the partition's order
    facts: list[PartFacts]
    local_users: list[np.ndarray]  # per part: indices into ``users``
    local_counts: list[np.ndarray]  # per part: each of those users' points in the part
    derived: tuple[str, ...]  # the functions of the points the column equals on every row
    crs_in: str = ""  # the input CRS (WKT), for public query objects (a point)


@dataclass(frozen=True)
class Split:
    """One partition located and split by the column (on a worker)."""

    frame: pd.DataFrame
    located: Any
    users: np.ndarray
    codes: np.ndarray  # each row's user code (into ``users``)
    values: list[Any]
    rows: list[np.ndarray]  # per part: row positions
    projected: list[Any]  # per part: its Projected points


def split_rows(part: pd.DataFrame, cols: Any) -> Split:
    """Locate a partition and project each of its parts with the part's public extent."""
    from gpframe.dask.partitions import _frame
    from gpframe.geo import _CHOICE_DATA, locate_points
    from gpframe.queries.privatize_plan import check_coordinates
    from gpframe.release import refuse_coordinate_copies

    name = cols.partition
    frame = _frame(part, cols)
    located = locate_points(
        frame, user=cols.user, x=cols.x, y=cols.y, lon=cols.lon, lat=cols.lat, crs=cols.crs,
        to_crs=cols.to_crs, domain=cols.domain,
    )  # fmt: skip
    refuse_coordinate_copies(frame, cols.public[1:], located)
    col = frame[name]
    if col.isna().any():
        raise InvalidInputError(
            f"partition={name!r}: column {name!r} has missing values; every row needs its part. "
            f"Fill or drop them. {_NOTHING}"
        )
    try:
        pcodes, values = pd.factorize(col, sort=True)
    except TypeError:  # values of mixed types: order of first appearance
        pcodes, values = pd.factorize(col, sort=False)
    domains = None if cols.part_domains is None else dict(cols.part_domains)
    codes, uniques = pd.factorize(pd.Series(located.users), sort=True)
    rows, projected = [], []
    for j, v in enumerate(values.tolist()):
        if domains is not None and v not in domains:
            raise InvalidInputError(
                f"domain=: no public extent for the part(s) {[v]!r} of partition={name!r}. "
                "Give every part a box (lon_min, lat_min, lon_max, lat_max), or pass one box "
                f"for all. {_NOTHING}"
            )
        r = np.flatnonzero(pcodes == j)
        p = located.subset(r, domain=None if domains is None else domains[v]).project()
        if p.crs_choice == _CHOICE_DATA:
            raise InvalidInputError(
                f"partition={name!r}: the Dask face needs each part's metric CRS chosen from "
                "public information; each partition would otherwise choose it from its own "
                f"rows. Give every part a box: domain={{{v!r}: (lon_min, lat_min, lon_max, "
                f"lat_max), ...}}, one box for all, or coordinates already in a projected "
                f"metre CRS. {_NOTHING}"
            )
        refuse_coordinate_copies(frame.iloc[r], cols.public[1:], p)
        check_coordinates(p.xy)
        rows.append(r)
        projected.append(p)
    return Split(frame=frame, located=located, users=np.asarray(uniques, dtype=object),
                 codes=codes.astype(np.int64), values=values.tolist(), rows=rows,
                 projected=projected)  # fmt: skip


def split_check(part: pd.DataFrame, cols: Any) -> SplitCheck:
    """First pass over one partition of a split frame: validate, count; draw nothing."""
    from gpframe.queries.partition_check import derived_matches

    if len(part) == 0:
        return SplitCheck(users=np.array([], dtype=object), counts=np.zeros(0, np.int64),
                          values=[], facts=[], local_users=[], local_counts=[],
                          derived=())  # fmt: skip
    with warnings.catch_warnings():
        # the client states the extent refusal itself; a warning here would stay on a worker
        warnings.simplefilter("ignore")
        s = split_rows(part, cols)
        derived = tuple(derived_matches(s.frame[cols.partition], s.located))
    counts = np.bincount(s.codes, minlength=len(s.users)).astype(np.int64)
    facts, lus, lcs = [], [], []
    for r, p in zip(s.rows, s.projected, strict=True):
        lu, lc = np.unique(s.codes[r], return_counts=True)
        lus.append(lu.astype(np.int64))
        lcs.append(lc.astype(np.int64))
        facts.append(PartFacts(crs_m=p.crs_m.srs,
                               scale_max=float(p.scale_max),
                               noise_inflation=float(p.noise_inflation),
                               n_points=len(r)))  # fmt: skip
    return SplitCheck(users=s.users, counts=counts, values=s.values, facts=facts,
                      local_users=lus, local_counts=lcs, derived=derived,
                      crs_in=s.located.crs_in.to_wkt())  # fmt: skip


@dataclass(frozen=True)
class Combined:
    """The partitions' first passes, as the client holds them."""

    users: np.ndarray
    counts: np.ndarray
    offsets: np.ndarray
    values: list[Any]  # every part, in the pandas face's order (sorted when comparable)
    facts: list[PartFacts]  # per part: its CRS and its points over all partitions
    index: list[list[int]]  # per partition: each of its parts' position in ``values``


def combine_split(checks: list[SplitCheck], partition: Any) -> Combined:
    """Join the partitions' first passes; refuse a column computed from the points.

    A part must have the same metric CRS in every partition (it is chosen from public
    information only, so a difference is a bug); a user's rows must be in one partition.
    """
    from gpframe.queries.partition_check import refuse

    live = [c for c in checks if len(c.users)]
    if not live:
        raise InvalidInputError(
            f"the frame is empty (0 rows): there is nothing to analyse. {_NOTHING}"
        )
    derived = [d for d in live[0].derived if all(d in c.derived for c in live[1:])]
    if derived:
        raise refuse(partition, f"column {partition!r} equals {derived[0]} on every row.")
    users = np.concatenate([c.users for c in checks])
    if pd.Series(users).duplicated().any():
        raise GpframeInternalError(
            "a user's rows are in several partitions after the shuffle on the user column."
        )
    counts = np.concatenate([c.counts for c in checks]).astype(np.int64)
    offsets = np.cumsum([0] + [len(c.users) for c in checks])
    seen: list[Any] = []
    facts: dict[Any, PartFacts] = {}
    for c in checks:
        for v, f in zip(c.values, c.facts, strict=True):
            if v not in facts:
                seen.append(v)
                facts[v] = f
                continue
            g = facts[v]
            if (g.crs_m, g.scale_max) != (f.crs_m, f.scale_max):
                raise GpframeInternalError(f"part {v!r} has two metric CRSs in two partitions.")
            facts[v] = dataclasses.replace(g, n_points=g.n_points + f.n_points)
    try:
        values = sorted(seen)
    except TypeError:  # values of mixed types: order of first appearance
        values = seen
    import pyproj

    for v in values:
        facts[v] = dataclasses.replace(facts[v], crs_text=pyproj.CRS(facts[v].crs_m).to_string())
    pos = {_key(v): j for j, v in enumerate(values)}
    index = [[pos[_key(v)] for v in c.values] for c in checks]
    return Combined(users=users, counts=counts, offsets=offsets, values=values,
                    facts=[facts[v] for v in values], index=index)  # fmt: skip


def _key(v: Any) -> Any:
    return (type(v).__name__, v)


@dataclass(frozen=True)
class StatedCrs:
    """A part's metric CRS as a Result states it (the pandas face's ``crs_m.to_string()``)."""

    text: str

    def to_string(self) -> str:
        """Return the CRS as the pandas face's ``crs_m.to_string()`` gives it."""
        return self.text
