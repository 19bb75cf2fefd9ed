"""One point per user without moving every row: select on each partition, then combine.

See ``docs/beyond-one-machine.md``. A one-point-per-user operation (``range_count``,
``kde_raster``, ``kde`` at query points, ``nearest_users``) needs, of each user, one selected
row, not every row. On a frame that is not partitioned by user, each input partition is
validated where it lies (the pandas face's checks and messages) and keeps its *candidates*:
each user's selected row under the rule of ``component=`` / ``reduce=`` on that partition,
with the key that orders it against the user's candidates of other partitions. Only the
candidates (at most one row per user and partition: user, key, x, y) are shuffled on the user
column, into as many partitions as the input has, and each output partition keeps one winner
per user. The full shuffle of every row (:func:`gpframe.dask.partitions.by_user`) is not run.

The winner is the pandas face's choice on the whole frame (its row order is the partitions'
order, then each partition's rows): with ``gp.Last(col)`` / ``gp.First(col)`` the latest /
earliest by ``(col, partition, row)``; with ``reduce="last"`` / ``"first"`` the last / first by
``(partition, row)``; without ``reduce``, a user with several selected rows, in one partition or
over several, is refused with the pandas face's message and count. The candidates are hashed on
the user column exactly as the full shuffle hashes it, so each user lands in the partition that
the full shuffle gives it, sorted the same way: the release tasks (one child stream each) see
the same users and points.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from gpframe.errors import GpframeInternalError, InvalidInputError

__all__ = [
    "Candidates",
    "OnePoint",
    "candidate_pieces",
    "candidates",
    "candidates_for_client",
    "clear_held",
    "one_point_candidates",
    "one_point_pass",
    "output_partition",
    "remembered",
    "winners",
    "winners_all",
    "winners_of",
    "winners_of_rows",
]

_NOTHING = "Nothing was charged."
_KEY, _PART, _POS, _N, _X, _Y = "__gp_key", "__gp_part", "__gp_pos", "__gp_n", "__gp_x", "__gp_y"


@dataclass(frozen=True)
class Candidates:
    """What the client fetches of one input partition's first stage: public facts only."""

    check: Any  # a PartCheck without users (the metric CRS of the partition)
    n: int  # number of candidate rows
    hint: str  # how to pick one point per user (the pandas face's hint, from the columns)


def _rule(select: Any) -> tuple[str, Any]:
    """Return ``("time", last)`` or ``("rows", reduce)``: how a user's candidates compete."""
    from gpframe.queries.range_count import First, Last

    comp = select.component
    if isinstance(comp, str) and comp in ("first", "last"):
        return "time", comp == "last"
    if isinstance(comp, (First, Last)):
        return "time", isinstance(comp, Last)
    return "rows", select.reduce


def _time_key(frame: pd.DataFrame, select: Any) -> pd.Series:
    """Return the time column (on a partition, the component was validated: it exists)."""
    from gpframe.queries.range_count import Last, _time_column

    comp = select.component
    if isinstance(comp, str):
        return frame[_time_column(frame, None, comp)]
    what = "last" if isinstance(comp, Last) else "first"
    return frame[_time_column(frame, comp.column, what)]


def candidates(
    part: pd.DataFrame, i: int, cols: Any, select: Any, meta: pd.DataFrame
) -> tuple[Candidates, pd.DataFrame]:
    """Validate input partition ``i`` and keep each user's candidate row (runs on a worker).

    Returns the public check and the candidates (``meta``'s columns): the user, the ordering
    key, the partition, the row, the number of the user's selected rows here (``reduce=None``
    refuses more than one over all partitions) and the projected point.
    """
    from gpframe.dask.partitions import PartCheck, checked
    from gpframe.queries.range_count import one_point_hint
    from gpframe.release import protected_columns

    if len(part) == 0:
        empty = PartCheck(users=np.array([], dtype=object), counts=np.zeros(0, np.int64))
        return Candidates(empty, 0, ""), meta
    kind, how = _rule(select)
    several = kind == "rows" and how is None
    # without reduce=, a user's several rows may lie in several partitions: keep the first of
    # each user here, and count whether there was another (the last differs from the first)
    sel = replace(select, reduce="first") if several else select
    frame, p, pos, check = checked(part, cols, sel)
    n = np.ones(len(pos), np.int64)
    if several:
        last = replace(select, reduce="last").rows(frame, p, cols)
        users = np.asarray(p.users)
        n = np.where(pos == last[pd.Index(users[last]).get_indexer(users[pos])], 1, 2)
    key = (_time_key(frame, select).iloc[pos].reset_index(drop=True) if kind == "time"
           else np.zeros(len(pos), np.int8))  # fmt: skip
    out = pd.DataFrame({
        cols.user: frame[cols.user].iloc[pos].reset_index(drop=True), _KEY: key,
        _PART: np.full(len(pos), i, np.int64), _POS: pos.astype(np.int64),
        _N: n.astype(np.int64), _X: p.xy[pos, 0], _Y: p.xy[pos, 1],
    })  # fmt: skip
    if list(out.dtypes) != list(meta.dtypes):  # the same columns: cast only what differs
        out = out.astype(meta.dtypes.to_dict())
    hint = one_point_hint(frame, (cols.user, *protected_columns(frame, p.coords)))
    return Candidates(check, len(out), hint), out


def candidates_meta(ddf: Any, cols: Any, select: Any) -> pd.DataFrame:
    """Return the candidates' empty frame, from the dask frame's metadata (on the client)."""
    kind, _ = _rule(select)
    frame = ddf._meta
    key = pd.Series(np.zeros(0, np.int8))
    if kind == "time":
        try:
            key = _time_key(frame, select).iloc[:0]
        except InvalidInputError:  # the partitions refuse it, after the pandas face's checks
            pass
    out = pd.DataFrame({cols.user: frame[cols.user].iloc[:0].reset_index(drop=True)})
    out[_KEY] = key.reset_index(drop=True)
    for c in (_PART, _POS, _N):
        out[c] = np.zeros(0, np.int64)
    out[_X], out[_Y] = np.zeros(0), np.zeros(0)
    return out


def winners(bucket: pd.DataFrame, cols: Any, rule: tuple[str, Any]) -> tuple[Any, Any]:
    """Keep one winner per user of a shuffled partition of candidates (runs on a worker).

    Returns what :func:`gpframe.dask.partitions.prepare` returns: the check (users sorted,
    one point each; the client adds the metric CRS) and the points in the users' order. Users with
    several selected rows under ``reduce=None`` are reported in ``check.several`` as
    ``(partition, row, user)`` of their first row, for the client to refuse.
    """
    from gpframe.dask.partitions import PartCheck

    if bucket is None or len(bucket) == 0:
        empty = PartCheck(users=np.array([], dtype=object), counts=np.zeros(0, np.int64))
        return empty, np.zeros((0, 2))
    codes, uniq = pd.factorize(bucket[cols.user], sort=True)
    part, pos = bucket[_PART].to_numpy(), bucket[_POS].to_numpy()
    kind, how = rule
    if kind == "time":  # ranks of the key: any ordered dtype (datetimes with a zone too)
        keys: tuple[Any, ...] = (pos, part, pd.factorize(bucket[_KEY], sort=True)[0], codes)
    else:
        keys = (pos, part, codes)
    order = np.lexsort(keys)  # by user, then (key,) partition, row: the pandas face's order
    srt = codes[order]
    last = how is True or how == "last"
    keep = np.flatnonzero(np.r_[srt[1:] != srt[:-1], True] if last else
                          np.r_[True, srt[1:] != srt[:-1]])  # fmt: skip
    win = order[keep]  # one row per user, in the sorted users' order
    several: tuple[Any, ...] = ()
    if kind == "rows" and how is None:
        total = np.bincount(codes, weights=bucket[_N].to_numpy(), minlength=len(uniq))
        first = order[np.flatnonzero(np.r_[True, srt[1:] != srt[:-1]])]
        bad = np.flatnonzero(total > 1)
        several = tuple(zip(part[first[bad]].tolist(), pos[first[bad]].tolist(),
                            np.asarray(uniq, dtype=object)[bad].tolist(), strict=True))  # fmt: skip
    xy = np.column_stack([bucket[_X].to_numpy()[win], bucket[_Y].to_numpy()[win]])
    check = PartCheck(users=np.asarray(uniq, dtype=object),
                      counts=np.ones(len(uniq), np.int64), several=several)  # fmt: skip
    return check, xy


def winners_all(buckets: list[list[pd.DataFrame]], cols: Any, rule: tuple[str, Any]) -> list[Any]:
    """:func:`winners` of every output partition at once (on the client, which holds them all).

    ``buckets[j]`` holds output partition ``j``'s pieces. The same checks and points as
    ``[winners(pd.concat(b), cols, rule) for b in buckets]``, from one sort of every candidate:
    a user's candidates all lie in one output partition (the hash of the user id), so sorting by
    (output partition, user, ...) orders each partition's users as its own sort does.
    """
    frames = [f for b in buckets for f in b]
    j_of = np.repeat(np.arange(len(buckets)), [sum(len(f) for f in b) for b in buckets])
    if not len(j_of):
        return [winners(None, cols, rule) for _ in buckets]
    return winners_of_rows(pd.concat(frames, ignore_index=True), j_of, len(buckets), cols, rule)


def winners_of_rows(
    whole: pd.DataFrame, j_of: np.ndarray, n: int, cols: Any, rule: tuple[str, Any]
) -> list[Any]:
    """:func:`winners_all` of rows in any order, row ``r`` in output partition ``j_of[r]``.

    The order of the rows does not matter: they are sorted by a key that is unique per row
    (output partition, user, (time,) partition, row).
    """
    from gpframe.dask.partitions import PartCheck

    if not len(j_of):
        return [winners(None, cols, rule) for _ in range(n)]
    from gpframe.dask.time_winners import winners_by_time

    # integer users, a time rule: one compiled pass per output partition, no sort
    fast = winners_by_time(whole, j_of, n, cols.user, rule, (_KEY, _PART, _POS, _X, _Y),
                           lambda: winners(None, cols, rule))  # fmt: skip
    if fast is not None:
        return fast
    codes, uniq = pd.factorize(whole[cols.user], sort=True)
    part, pos = whole[_PART].to_numpy(), whole[_POS].to_numpy()
    kind, how = rule
    # (partition, row) and (output partition, user) as one int64 key each: fewer sort passes
    row = part * (int(pos.max()) + 1) + pos
    group = j_of.astype(np.int64) * max(len(uniq), 1) + codes
    if kind == "time":
        keys: tuple[Any, ...] = (row, pd.factorize(whole[_KEY], sort=True)[0], group)
    else:
        keys = (row, group)
    order = np.lexsort(keys)  # by output partition, user, then (key,) partition, row
    srt_j, srt = j_of[order], codes[order]
    new = np.r_[True, (srt[1:] != srt[:-1]) | (srt_j[1:] != srt_j[:-1])]  # a group's first row
    starts = np.flatnonzero(new)
    ends = np.r_[starts[1:] - 1, len(order) - 1]
    last = how is True or how == "last"
    win = order[ends if last else starts]  # one row per (partition, user), in that order
    first = order[starts]
    total = None
    if kind == "rows" and how is None:
        total = np.add.reduceat(whole[_N].to_numpy()[order].astype(np.float64), starts)
    xs, ys = whole[_X].to_numpy(), whole[_Y].to_numpy()
    users = np.asarray(uniq, dtype=object)
    cut = np.searchsorted(j_of[win], np.arange(n + 1))
    out = []
    for j in range(n):
        sl = slice(cut[j], cut[j + 1])
        w = win[sl]
        if not len(w):
            out.append(winners(None, cols, rule))
            continue
        several: tuple[Any, ...] = ()
        if total is not None:
            bad = np.flatnonzero(total[sl] > 1)
            f = first[sl][bad]
            several = tuple(zip(part[f].tolist(), pos[f].tolist(),
                                users[codes[f]].tolist(), strict=True))  # fmt: skip
        check = PartCheck(users=users[codes[w]], counts=np.ones(len(w), np.int64),
                          several=several)  # fmt: skip
        out.append((check, np.column_stack([xs[w], ys[w]])))
    return out


@dataclass(frozen=True)
class OnePoint:
    """The first pass of a one-point-per-user operation, as the client holds it."""

    #: per partition: (check, selected points), persisted on the workers, or held by the client
    #: (``fetch=True`` and few points): then the release tasks get them in their graph
    parts: tuple[Any, ...]
    checks: list[Any]
    users: np.ndarray  # every user with a selected point, partition by partition, sorted within
    offsets: np.ndarray  # partition i's users are users[offsets[i]:offsets[i + 1]]
    ref: Any  # the PartCheck that carries the metric CRS
    #: per partition: its users' digest, computed on its worker; None for points the client
    #: holds (a task that gets its points in its graph cannot find other users)
    digests: tuple[str | None, ...] = ()

    def wants(self) -> list[str | None]:
        """Each partition's digest (its recomputation must find the same users)."""
        return list(self.digests)

    @property
    def held(self) -> bool:
        """Whether the client holds every partition's selected points (none on a worker)."""
        import dask

        return not any(dask.is_dask_collection(p) for p in self.parts)

    def release(self, fn: Any, calls: list[tuple[Any, ...]]) -> list[Any]:
        """Run ``fn(*call)``, one call per partition (each call's first argument its points).

        When the client holds every partition's points (few points, :data:`CLIENT_ROWS`), the
        calls run here, in the client, one after the other: no second round trip to the
        cluster. Each call still draws from its own stream
        (:func:`gpframe.dask.partitions.spawn_rng`: the client's OS CSPRNG, or the same child
        of a seeded test source that a worker would get), so the released values are those of
        the same calls on the workers. Otherwise one task per partition runs on the workers,
        each drawing from its worker's own stream.
        """
        import dask

        if self.held and CLIENT_RELEASE:
            return [fn(*call) for call in calls]
        return list(dask.compute(*[dask.delayed(fn)(*call) for call in calls]))


#: with ``fetch=True``, the selected points (or the candidates) of at most this many rows in all
#: come back to the client with the first pass's checks, in the same round trip: the client keeps
#: each user's winner (:func:`winners`) and the release tasks get their partition's points in
#: their graph, so no task exchanges candidates between workers and no task only sends the
#: client a check. Above it, the points stay on the workers.
CLIENT_ROWS = 1_000_000

#: the points the client holds are released by the client itself (:meth:`OnePoint.release`);
#: False sends them to one release task per partition on the workers, the former way (kept for
#: comparison: tests and benchmarks only)
CLIENT_RELEASE = True


def one_point_pass(
    ddf: Any, cols: Any, select: Any, empty: str, *, shuffle: bool | None = None,
    fetch: bool = False,
) -> OnePoint:  # fmt: skip
    """Validate and select one point per user on every partition; draw nothing.

    ``empty`` is the refusal when no user has a selected row. A frame indexed by user is read
    where it lies. Otherwise each partition keeps its users' candidate rows and only those are
    shuffled on the user column (:func:`one_point_candidates`); ``shuffle=True`` (default:
    :data:`gpframe.dask.partitions.FULL_SHUFFLE`; tests and benchmarks only) shuffles every row
    first (:func:`gpframe.dask.partitions.by_user`), the former way: the same points.
    ``fetch=True`` (an operation that releases each point in one task per partition, not over
    rounds that the client drives) brings few points to the client (:data:`CLIENT_ROWS`).
    """
    import dask

    from gpframe.dask import partitions as _parts
    from gpframe.dask.partitions import by_user, combine, persisted_futures, prepare

    if cols.index_is_user or (_parts.FULL_SHUFFLE if shuffle is None else shuffle):
        data, shuffled = by_user(ddf, cols)
        tasks = (None if shuffled else persisted_futures(data)) or data.to_delayed()
        parts = list(dask.persist(*[dask.delayed(prepare)(d, cols, select) for d in tasks]))
        cap = CLIENT_ROWS // len(parts) if fetch else -1
        got = dask.compute(*[dask.delayed(_fetched)(p, cap) for p in parts])
        checks, digests = [g[0] for g in got], [g[1] for g in got]
        # a partition of few points comes back whole; the others stay on their workers
        parts = [p if g[2] is None else g[2] for p, g in zip(parts, got, strict=True)]
    else:
        parts, checks, digests = one_point_candidates(ddf, cols, select, fetch=fetch)
    if not any(len(c.users) for c in checks):
        raise InvalidInputError(f"{empty} {_NOTHING}")
    users, _, offsets, ref = combine(checks)
    return OnePoint(tuple(parts), checks, users, offsets, ref, tuple(digests))


#: up to this many output partitions the candidates are exchanged by a plain graph of tasks (each
#: input partition splits its candidates into one piece per output partition, each output
#: partition gathers its pieces): P * (P + 2) small tasks, built and submitted with the first
#: stage in one go. Above it, dask's task shuffle (stages of at most 32 branches) keeps the number
#: of tasks near P log P.
DIRECT_EXCHANGE = 32


def one_point_candidates(
    ddf: Any, cols: Any, select: Any, *, fetch: bool = False
) -> tuple[list[Any], list[Any], list[str | None]]:
    """Run both stages: each output partition's ``(check, points)``, check and digest.

    Refuses (on the client, before the ledger is touched) what the pandas face refuses: the
    partitions' own errors surface from the first stage; several selected rows of one user
    over several partitions (``reduce=None``) are refused here with the pandas face's message.
    One round trip: both stages are submitted at once, the client fetches only the checks;
    with ``fetch=True`` and few candidates, the client fetches them and keeps the winners
    itself (the same :func:`winners`, on the same pieces), and no exchange runs. On a persisted
    frame that is one task per partition (:func:`candidates_for_client`), and the candidates
    the client already holds from an earlier query are confirmed by their worker, not sent again.
    """
    import dask

    from gpframe.dask.partitions import first, persisted_futures

    meta = candidates_meta(ddf, cols, select)
    n = ddf.npartitions
    rule = _rule(select)
    ways = n if n <= DIRECT_EXCHANGE else 1
    futures = persisted_futures(ddf)
    if fetch and futures is not None:
        parts, metas = _fetch_persisted(futures, cols, select, meta, rule)
        if parts is not None:
            return _refusals(parts, metas, [p[0] for p in parts], [None] * n, select)
    if futures is not None:  # a persisted frame: tasks on its futures, no graph per call
        client = futures[0].client
        stage = client.map(candidate_pieces, futures, range(n), cols=cols, select=select,
                           meta=meta, n=n, ways=ways, pure=False)  # fmt: skip
    else:
        stage = [dask.delayed(candidate_pieces)(d, i, cols, select, meta, n, ways)
                 for i, d in enumerate(ddf.to_delayed())]  # fmt: skip
    if fetch and futures is None:
        stage = list(dask.persist(*stage))
        got = dask.compute(*[dask.delayed(_small)(s, CLIENT_ROWS // n) for s in stage])
        metas = [g[0] for g in got]
        if all(g[1] is not None for g in got):
            pieces = [g[1] for g in got]
            if ways != n:  # one piece each: split them here, by the shuffle's hash
                whole = pd.concat([p[0] for p in pieces], ignore_index=True)
                to = output_partition(whole, cols.user, meta[cols.user].dtype, n)
                pieces = [[whole[to == j] for j in range(n)]]
            parts = winners_all([[p[j] for p in pieces] for j in range(n)], cols, rule)
            checks = [p[0] for p in parts]
            return _refusals(parts, metas, checks, [None] * n, select)
    if ways == n:  # a direct exchange: no dataframe graph to build and optimise
        pieces = [[dask.delayed(_piece)(s, j) for s in stage] for j in range(n)]
        parts = [dask.delayed(winners_of)(cols, rule, *pieces[j]) for j in range(n)]
    else:
        parts = _task_shuffle(stage, cols, meta, rule, n)
    # one submission: the stages and the winners run; the client fetches only the checks
    stage, parts = _persist(stage, parts)
    got = dask.compute(*[dask.delayed(first)(s) for s in stage],
                       *[dask.delayed(_fetched)(p, -1) for p in parts])  # fmt: skip
    metas = list(got[: len(stage)])
    checks, digests = [g[0] for g in got[len(stage) :]], [g[1] for g in got[len(stage) :]]
    return _refusals(parts, metas, checks, digests, select)


def _fetch_persisted(
    futures: list[Any], cols: Any, select: Any, meta: pd.DataFrame, rule: tuple[str, Any]
) -> tuple[list[Any] | None, list[Candidates]]:
    """Fetch a persisted frame's few candidates and keep the winners: one task per partition.

    Returns each output partition's ``(check, points)`` (None when some partition has more
    than its share of :data:`CLIENT_ROWS`: they stay on the workers) and the partitions'
    candidate facts. The client sends, per partition, the token of the candidates it holds
    from an earlier query (:data:`_held`); a worker whose remembered first pass has that token
    (:func:`gpframe.dask.memo.first_pass_token`: the same partition object, the same
    parameters) confirms it instead of sending the rows, and when every partition confirms,
    the client's winners of those rows are used again.
    """
    n = len(futures)
    client = futures[0].client
    blob = _params_blob(cols, select, meta, n)
    known = [_held.token((f.key, i, blob)) if blob is not None else None
             for i, f in enumerate(futures)]  # fmt: skip
    got = client.gather(client.map(
        candidates_for_client, futures, range(n), [k for k, _ in known], cols=cols,
        select=select, meta=meta, n=n, cap=CLIENT_ROWS // n, pure=False,
    ))  # fmt: skip
    metas = [g[0] for g in got]
    rows = []
    for i, (_, out, to, token) in enumerate(got):
        if out is None:
            if token is None or token != known[i][0]:
                return None, metas  # too many candidates: they stay on the workers
            out, to = known[i][1]  # confirmed by the worker: the rows held here
        elif token is not None and blob is not None:
            _held.keep((futures[i].key, i, blob), token, (out, to))
        rows.append((out, to))
    tokens = tuple(g[3] for g in got)
    if blob is not None and None not in tokens:
        parts = _held.winners(tokens)
        if parts is not None:
            return parts, metas
    whole = pd.concat([r[0] for r in rows], ignore_index=True)
    j_of = np.concatenate([r[1] for r in rows]).astype(np.int64)
    parts = winners_of_rows(whole, j_of, n, cols, rule)
    for _, xy in parts:  # shared with later queries: the release reads them, never writes
        xy.flags.writeable = False
    if blob is not None and None not in tokens:
        _held.keep_winners(tokens, parts)
    return parts, metas


def _params_blob(cols: Any, select: Any, meta: pd.DataFrame, n: int) -> bytes | None:
    """Return the parameters of a first pass as bytes (None: a callable component, never held)."""
    import pickle

    if callable(getattr(select, "component", None)):
        return None
    try:
        shape = (list(meta.columns), [str(d) for d in meta.dtypes])
        return pickle.dumps((cols, select, shape, n), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # not comparable by value: never held
        return None


class _Held:
    """The candidate rows the client fetched, by their worker entry's token, and their winners.

    Bounded (:data:`HELD_LIMIT` bytes, oldest dropped first). A token names one remembered
    first pass on one worker (one partition object, one set of parameters); the rows kept under
    it are what that pass returned, so the worker's confirmation of the token is a confirmation
    of the rows. Thread-safe: several threads of one client may query at once.
    """

    def __init__(self) -> None:
        import threading
        from collections import OrderedDict

        self._lock = threading.Lock()
        self._tokens: dict[Any, str] = {}  # (future key, partition, parameters) -> token
        self._items: OrderedDict[Any, tuple[Any, int]] = OrderedDict()  # -> (value, bytes)
        self._size = 0

    def token(self, where: Any) -> tuple[str | None, Any]:
        """Return the token of the rows held for ``where`` and the rows, or (None, None)."""
        with self._lock:
            token = self._tokens.get(where)
            item = self._items.get(("rows", token)) if token is not None else None
            if item is None:
                return None, None
            self._items.move_to_end(("rows", token))
            return token, item[0]

    def keep(self, where: Any, token: str, rows: tuple[pd.DataFrame, np.ndarray]) -> None:
        """Hold the rows a worker sent with ``token`` for ``where``."""
        nbytes = int(rows[0].memory_usage(index=True, deep=False).sum()) + rows[1].nbytes
        with self._lock:
            self._tokens[where] = token
            self._put(("rows", token), rows, nbytes)

    def winners(self, tokens: tuple[str, ...]) -> list[Any] | None:
        """Return the winners kept for these partitions' tokens, or None."""
        with self._lock:
            item = self._items.get(("winners", tokens))
            if item is None:
                return None
            self._items.move_to_end(("winners", tokens))
            return list(item[0])

    def keep_winners(self, tokens: tuple[str, ...], parts: list[Any]) -> None:
        nbytes = sum(xy.nbytes + 8 * len(c.users) for c, xy in parts)
        with self._lock:
            self._put(("winners", tokens), tuple(parts), nbytes)

    def clear(self) -> None:
        with self._lock:
            self._tokens.clear()
            self._items.clear()
            self._size = 0

    def _put(self, key: Any, value: Any, nbytes: int) -> None:
        old = self._items.pop(key, None)
        if old is not None:
            self._size -= old[1]
        if nbytes > HELD_LIMIT // 4:
            return
        self._items[key] = (value, nbytes)
        self._size += nbytes
        while self._size > HELD_LIMIT and self._items:
            _, (_, size) = self._items.popitem(last=False)
            self._size -= size
        live = {k[1] for k in self._items if k[0] == "rows"}
        if len(self._tokens) > 4 * len(live) + 64:  # forget the names of dropped rows
            self._tokens = {w: t for w, t in self._tokens.items() if t in live}


#: bytes of candidate rows and winners the client holds between queries (0: none)
HELD_LIMIT = 64 * 2**20

_held = _Held()


def clear_held() -> None:
    """Forget the candidate rows and winners this client holds (the next query fetches them)."""
    _held.clear()


def _refusals(
    parts: list[Any], metas: list[Candidates], checks: list[Any], digests: list[Any], select: Any
) -> tuple[list[Any], list[Any], list[Any]]:
    """Refuse two metric CRSs or several selected rows; give each check the metric CRS."""
    live = [m for m in metas if m.n]
    if not live:
        return [], [], []
    crs = {(m.check.crs_m, m.check.scale_max) for m in live}
    if len(crs) != 1:  # public information only, so the same everywhere: a bug if not
        raise GpframeInternalError(f"the partitions chose different metric CRSs: {crs!r}.")
    several = sorted(s for c in checks for s in c.several)
    if several:
        _refuse_several(several, select, live[0].hint)
    ref = live[0].check
    checks = [c if not len(c.users) else replace(ref, users=c.users, counts=c.counts)
              for c in checks]  # fmt: skip
    return list(parts), checks, list(digests)


def _persist(stage: list[Any], parts: list[Any]) -> tuple[list[Any], list[Any]]:
    import dask

    out = dask.persist(*stage, *parts)
    return list(out[: len(stage)]), list(out[len(stage) :])


def _task_shuffle(stage: list[Any], cols: Any, meta: Any, rule: Any, n: int) -> list[Any]:
    """Shuffle the candidates by dask's task shuffle (many output partitions)."""
    import dask
    import dask.dataframe as dd

    cand = dd.from_delayed([dask.delayed(_second)(s) for s in stage], meta=meta,
                           verify_meta=False)  # fmt: skip
    # the same hash of the same user column into as many partitions as the full shuffle; a
    # task shuffle: the candidates are few, and a peer-to-peer shuffle's set-up would dominate
    moved = cand.shuffle(on=cols.user, npartitions=n, shuffle_method="tasks")
    return [dask.delayed(winners)(b, cols, rule) for b in moved.to_delayed()]


def candidate_pieces(
    part: pd.DataFrame, i: int, cols: Any, select: Any, meta: pd.DataFrame, n: int, ways: int
) -> tuple[Candidates, list[pd.DataFrame]]:
    """:func:`candidates`, split into ``ways`` pieces by output partition (runs on a worker).

    ``ways`` is ``n`` (the output partitions) or 1 (one piece). The first pass is remembered
    while the partition lives on this worker (:func:`remembered`).
    """
    (facts, out, to), _ = remembered(part, i, cols, select, meta, n)
    if ways == 1:
        return facts, [out]
    return facts, [out[to == j] for j in range(ways)]


def candidates_for_client(
    part: pd.DataFrame, i: int, known: str | None, cols: Any, select: Any, meta: pd.DataFrame,
    n: int, cap: int,
) -> tuple[Candidates, pd.DataFrame | None, np.ndarray | None, str | None]:  # fmt: skip
    """Return what the client fetches of partition ``i``'s first pass (it keeps the winners).

    Returns the facts, the candidates and their output partitions, and the token of the
    remembered pass. When that token is ``known`` (the client holds those rows already), or
    there are more than ``cap`` rows (they stay here), the rows are not sent (None); the token
    is then ``known``, or None.
    """
    (facts, out, to), token = remembered(part, i, cols, select, meta, n)
    if token is not None and token == known:
        return facts, None, None, token
    if facts.n > cap:
        return facts, None, None, None
    return facts, out, to, token


def remembered(
    part: pd.DataFrame, i: int, cols: Any, select: Any, meta: pd.DataFrame, n: int
) -> tuple[tuple[Candidates, pd.DataFrame, np.ndarray], str | None]:
    """Partition ``i``'s candidates and each one's output partition (of ``n``), and their token.

    Remembered while the partition lives on this worker (:mod:`gpframe.dask.memo`): a query on
    a persisted frame with the same roles and rule passes over its rows once.
    """
    from gpframe.dask.memo import first_pass_token

    shape = (list(meta.columns), [str(d) for d in meta.dtypes])
    return first_pass_token(part, ("candidates", i, cols, select, shape, n),
                            lambda: _with_outputs(part, i, cols, select, meta, n))  # fmt: skip


def _with_outputs(
    part: pd.DataFrame, i: int, cols: Any, select: Any, meta: pd.DataFrame, n: int
) -> tuple[Candidates, pd.DataFrame, np.ndarray]:
    facts, out = candidates(part, i, cols, select, meta)
    to = (output_partition(out, cols.user, meta[cols.user].dtype, n) if n > 1
          else np.zeros(len(out), np.int64))  # fmt: skip
    return facts, out, to.astype(np.int32)


def output_partition(frame: pd.DataFrame, user: str, dtype: Any, n: int) -> np.ndarray:
    """Each row's output partition: the hash of the user column that dask's shuffle computes.

    Dask's hash shuffle on a column (``ddf.shuffle(on=user, npartitions=n)``, task or
    peer-to-peer) sends a row to ``hash_pandas_object(frame[[user]], index=False) % n``, after
    casting a numeric (or numeric categorical) column to float64 as its ``meta`` says. The same
    function here puts each user in the partition a shuffle of every row gives it.
    """
    from dask.dataframe.shuffle import partitioning_index

    col = frame[user]
    numeric = pd.api.types.is_numeric_dtype(dtype) or (
        isinstance(dtype, pd.CategoricalDtype) and pd.api.types.is_numeric_dtype(dtype.categories)
    )
    if numeric and isinstance(col.dtype, np.dtype) and col.dtype.kind in "iuf":
        # the same float64 values as the cast below, without its frame-level machinery
        key = pd.DataFrame({user: col.to_numpy(dtype=np.float64)})
    elif numeric:
        key = frame[[user]].astype({user: np.float64}, errors="ignore")
    else:
        key = frame[[user]]
    return np.asarray(partitioning_index(key, n))


def _piece(stage: tuple[Candidates, list[pd.DataFrame]], j: int) -> pd.DataFrame:
    return stage[1][j]


def _small(stage: tuple[Candidates, list[pd.DataFrame]], cap: int) -> tuple[Candidates, Any]:
    """Return a partition's candidate facts, and its pieces if they hold at most ``cap`` rows."""
    return stage[0], (stage[1] if stage[0].n <= cap else None)


def winners_of(cols: Any, rule: tuple[str, Any], *pieces: pd.DataFrame) -> tuple[Any, Any]:
    """:func:`winners` of one output partition's pieces (one from each input partition)."""
    return winners(pd.concat(pieces, ignore_index=True), cols, rule)


def _fetched(prepared: tuple[Any, Any], cap: int) -> tuple[Any, Any, Any]:
    """Return what the client fetches of a selected partition (its check first).

    Then its users' digest and None, or, with at most ``cap`` users, None and the whole
    partition (check and points).
    """
    from gpframe.dask.partitions import digest

    check = prepared[0]
    if len(check.users) <= cap:
        return check, None, prepared
    return check, digest(check.users, check.counts), None


def _second(stage: tuple[Candidates, list[pd.DataFrame]]) -> pd.DataFrame:
    return stage[1][0]


def _refuse_several(several: list[Any], select: Any, hint: str) -> None:
    """Refuse users with several selected rows over the partitions (the pandas face's message)."""
    many = [u for _, _, u in several]
    show = ", ".join(map(repr, many[:5])) + (", ..." if len(many) > 5 else "")
    raise InvalidInputError(
        f"{len(many)} user(s) have several rows in the selected component (users {show}); "
        f"{select.operation} reads one point per user, so a trajectory needs a rule for which "
        f"point (docs/operations/range_count.md). {hint} {_NOTHING}"
    )
