"""A worker's first passes over a partition it holds, remembered while the partition lives.

See ``docs/beyond-one-machine.md`` ("What it costs"). The first pass of an operation
(validation, projection, each user's selected row; no noise, nothing written) is a
deterministic function of the partition's rows and the call's public parameters. A frame
persisted on the cluster hands every query the same partition objects, so a worker that has
run a first pass over one of them returns the same result to the next query with the same
parameters, instead of validating and selecting again.

What keeps this safe:

* the entry is tied to the partition *object* (a weak reference): it is dropped when the
  object is freed, so a partition read anew (a frame that is not persisted, a worker restarted
  after a failure) is always passed over again, and an id Python reuses never finds an entry;
  Dask's contract is that a key's data are never changed in place, which is what a persisted
  partition is;
* the parameters are compared as their pickled bytes (the column roles, the component rule,
  the partition number...): any difference is a miss; a component given as a callable (which
  may read anything) is never remembered;
* only successful passes are kept (a refusal is raised again, from the rows, by the next
  call), and nothing of it leaves the worker but what the pass returns anyway: the privacy
  of a query is decided by its reservation and release, which run every time;
* the memory is bounded (:data:`LIMIT` bytes per worker process, oldest entries dropped first;
  a pass larger than a quarter of it is not kept).

Each entry carries a *token*, a random name given when it is kept (:func:`first_pass_token`).
A client that holds what an entry's pass returned (:mod:`gpframe.dask.one_point`: few
candidate rows) sends the token back with its next query: the worker confirms it (the same
partition object, the same parameters, so the same result) instead of sending the result again.
A partition read anew, or an entry dropped, has no entry or another token: the pass is sent.

The callers never modify what a pass returns (its pieces are concatenated into new frames).
"""

from __future__ import annotations

import pickle
import threading
import uuid
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["LIMIT", "clear", "first_pass", "first_pass_token"]

T = TypeVar("T")

#: bytes of remembered first passes per worker process (0: remember nothing)
LIMIT = 256 * 2**20

_lock = threading.RLock()  # a freed partition's callback may run in any thread
#: (id of the partition, parameters' bytes) -> (weak reference, result, bytes, token)
_entries: OrderedDict[tuple[int, bytes], tuple[Any, Any, int, str]] = OrderedDict()
_size = [0]


def first_pass(part: Any, params: tuple[Any, ...], compute: Callable[[], T]) -> T:
    """Return ``compute()`` for this partition object and ``params``, computed once while it lives.

    ``params`` holds everything besides the rows that the result depends on.
    """
    return first_pass_token(part, params, compute)[0]


def first_pass_token(
    part: Any, params: tuple[Any, ...], compute: Callable[[], T]
) -> tuple[T, str | None]:
    """:func:`first_pass`, and the token of the entry that holds the result (None: not kept).

    The same token comes back as long as the same entry answers: the same partition object
    and parameters, so the same result.
    """
    key = _key(part, params)
    if key is None or LIMIT <= 0:
        return compute(), None
    with _lock:
        hit = _entries.get(key)
        if hit is not None and hit[0]() is part:
            _entries.move_to_end(key)
            return hit[1], hit[3]
    out = compute()
    return out, _keep(part, key, out)


def clear() -> None:
    """Forget every remembered pass of this process (benchmarks measure a cold first pass)."""
    with _lock:
        _entries.clear()
        _size[0] = 0


def _key(part: Any, params: tuple[Any, ...]) -> tuple[int, bytes] | None:
    """Return the entry's key, or None when ``params`` cannot be compared by value."""
    if any(callable(getattr(p, "component", None)) for p in params):
        return None  # a callable component may read state beyond its arguments
    try:
        blob = pickle.dumps(params, protocol=pickle.HIGHEST_PROTOCOL)
        weakref.ref(part)
    except Exception:  # not comparable by value: never remembered
        return None
    return id(part), blob


def _keep(part: Any, key: tuple[int, bytes], out: Any) -> str | None:
    """Keep ``out`` for this partition object and parameters; return the entry's token."""
    from dask.sizeof import sizeof

    nbytes = int(sizeof(out)) + len(key[1])
    if nbytes > LIMIT // 4:
        return None
    token = uuid.uuid4().hex  # names the entry only: a new entry, a new name

    def gone(_: Any, key: tuple[int, bytes] = key) -> None:  # the partition was freed
        with _lock:
            old = _entries.pop(key, None)
            if old is not None:
                _size[0] -= old[2]

    with _lock:
        old = _entries.pop(key, None)
        if old is not None:
            _size[0] -= old[2]
        _entries[key] = (weakref.ref(part, gone), out, nbytes, token)
        _size[0] += nbytes
        while _size[0] > LIMIT and _entries:
            _, (_, _, n, _) = _entries.popitem(last=False)
            _size[0] -= n
    return token
