"""Tamper evidence for the ledger: the audit chain's link, the state digest, the anchor file.

Three layers, each optional beyond the first (the page ``SECURITY.md`` says what each detects):

* every audit row carries ``state``, a summary of the whole ledger after that row (users and a
  hash of their ids, committed charges and their total per notion, the budgets, a hash of the
  budget overrides); a Session compares the file with the head row's ``state`` when it opens;
* the audit chain links rows with SHA-256, or with HMAC-SHA-256 under a key held outside the
  ledger file (``ledger_key=``), so that rows cannot be rewritten without the key;
* an anchor file outside the database records the chain head ``(seq, hash)`` after every write;
  the ledger must still contain that row with that hash.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import secrets
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from gpframe.errors import InvalidInputError, LedgerCorruptError

try:  # POSIX: serialise anchor updates between processes
    import fcntl
except ImportError:  # pragma: no cover - Windows: updates stay monotonic but may race
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "Anchor",
    "Chain",
    "anchor_path",
    "compare_state",
    "load_key",
    "uid_bytes",
    "uid_records",
]

ANCHOR_SCHEMA = "gpframe-ledger-anchor"
#: meta values naming the audit chain's link function
SHA256, HMAC = "sha256", "hmac-sha256"
MIN_KEY = 16


def load_key(key: object) -> bytes | None:
    """Return the ledger key: ``bytes`` as given, or the bytes of the file a path names."""
    if key is None:
        return None
    if isinstance(key, (bytes, bytearray, memoryview)):
        raw = bytes(key)
        where = "ledger_key"
    elif isinstance(key, (str, os.PathLike)):
        try:
            raw = Path(os.fspath(key)).read_bytes()
        except OSError as exc:
            raise InvalidInputError(
                f"ledger_key={key!r} names a key file that cannot be read ({exc}); pass the "
                "key's bytes or the path of a readable key file. Nothing was charged."
            ) from exc
        where = f"the key file {os.fspath(key)!r}"
    else:
        raise InvalidInputError(
            f"ledger_key must be bytes or the path of a key file, got {type(key).__name__}. "
            "Nothing was charged."
        )
    if len(raw) < MIN_KEY:
        raise InvalidInputError(
            f"{where} holds {len(raw)} bytes; a ledger key needs at least {MIN_KEY} random "
            "bytes (e.g. secrets.token_bytes(32)). Nothing was charged."
        )
    return raw


class Chain:
    """The audit chain's link: ``hash_i = H(hash_{i-1} || content_i)``, keyed or not."""

    def __init__(self, key: bytes | None) -> None:
        self.key = key
        self.kind = SHA256 if key is None else HMAC

    def link(self, prev: str, content: str) -> str:
        """Return the hash of a row whose predecessor's hash is ``prev``."""
        data = bytes.fromhex(prev) + content.encode()
        if self.key is None:
            return hashlib.sha256(data).hexdigest()
        return hmac.new(self.key, data, hashlib.sha256).hexdigest()

    def key_id(self) -> str:
        """Return a key fingerprint (the ledger stores it to tell a wrong key from tampering)."""
        assert self.key is not None
        return hmac.new(self.key, b"gpframe-ledger-key-id", hashlib.sha256).hexdigest()[:32]


_INT64_MAX = 2**63 - 1


def uid_records(uids: np.ndarray) -> np.ndarray:
    """``uid_bytes`` of an int64 id array as packed records (``b"i"``, 8 bytes) in one array.

    Its buffer holds exactly the bytes of :func:`uid_bytes`: a hash can read it without a copy.
    """
    rec = np.empty(uids.size, dtype=[("t", "S1"), ("v", "<i8")])
    rec["t"], rec["v"] = b"i", uids
    return rec


def uid_bytes(uids: Iterable[Any] | np.ndarray) -> bytes:
    """Encode user ids self-delimitingly, the same however the ids are batched.

    An int is ``b"i"`` and 8 little-endian bytes; a str is ``b"s"``, its UTF-8 length (4 bytes)
    and its UTF-8 bytes; so ``1`` and ``"1"`` differ and concatenations are unambiguous. An int
    above 2**63 - 1 (a uint64 id) is ``b"u"`` and 8 little-endian unsigned bytes.
    """
    if isinstance(uids, np.ndarray) and uids.dtype.kind == "i":
        return uid_records(uids).tobytes()
    uids = list(uids)
    if uids and all(type(u) is str for u in uids):
        return _str_bytes(uids)
    parts = []
    for u in uids:
        if isinstance(u, str):
            b = u.encode("utf-8", "surrogatepass")
            parts.append(b"s" + len(b).to_bytes(4, "little") + b)
        elif int(u) > _INT64_MAX:  # a uint64 id above 2**63 - 1 (gpframe.ledger.keys)
            parts.append(b"u" + int(u).to_bytes(8, "little", signed=False))
        else:
            parts.append(b"i" + int(u).to_bytes(8, "little", signed=True))
    return b"".join(parts)


def _str_bytes(uids: list[str]) -> bytes:
    """``uid_bytes`` of str ids, assembled with numpy rather than one join piece per id."""
    enc = [u.encode("utf-8", "surrogatepass") for u in uids]
    lens = np.fromiter(map(len, enc), dtype=np.int64, count=len(enc))
    starts = np.concatenate(([0], np.cumsum(lens + 5)[:-1]))
    out = np.empty(int(lens.sum()) + 5 * lens.size, dtype=np.uint8)
    body = np.ones(out.size, dtype=bool)
    for k in range(5):
        body[starts + k] = False
    out[starts] = ord("s")
    out[(starts[:, None] + np.arange(1, 5)).ravel()] = (
        lens.astype("<u4").view(np.uint8).reshape(-1, 4).ravel()
    )
    out[body] = np.frombuffer(b"".join(enc), dtype=np.uint8)
    return out.tobytes()


def overrides_digest(dense: np.ndarray) -> str:
    """Hash of the per-user budget overrides (``-1`` = none) as (index, budget) pairs."""
    at = np.flatnonzero(dense >= 0).astype("<i8")
    h = hashlib.sha256(at.tobytes())
    h.update(b"\x00")
    h.update(np.ascontiguousarray(dense[at], dtype="<i8").tobytes())
    return h.hexdigest()


def compare_state(rec: dict[str, Any], now: dict[str, Any], advice: str) -> None:
    """Raise :class:`LedgerCorruptError` listing how the file differs from the recorded state."""
    problems = []
    if (rec["users"], rec["users_sha"]) != (now["users"], now["users_sha"]):
        problems.append(
            f"the user table holds {now['users']} users but the audit log records "
            f"{rec['users']}" if rec["users"] != now["users"] else
            "a user id was changed (the user table's hash differs from the audit log's)"
        )  # fmt: skip
    if rec["charges"] != now["charges"]:
        problems.append(
            f"the file holds {now['charges']} charges but the audit log records {rec['charges']}"
        )
    for n in sorted(set(rec["budgets"]) | set(now["budgets"])):
        if rec["budgets"].get(n) != now["budgets"].get(n):
            problems.append(
                f"the stored {n} budget is {now['budgets'].get(n)!r} (kind:exponent:default "
                f"units) but the audit log records {rec['budgets'].get(n)!r}"
            )
        if rec["spent"].get(n, "0") != now["spent"].get(n, "0"):
            problems.append(
                f"the users' {n} spent adds up to {now['spent'].get(n, '0')} units but the "
                f"committed charges add up to {rec['spent'].get(n, '0')}"
            )
        if n in now["overrides"] and rec["overrides"].get(n) != now["overrides"][n]:
            problems.append(f"the per-user {n} budget overrides differ from the audit log's")
    if problems:
        raise LedgerCorruptError(
            "the ledger file does not match its audit log: " + "; ".join(problems) + ". It "
            f"was changed outside gpframe. {advice}"
        )


def anchor_path(path: str | None, anchor: object) -> str | None:
    """Resolve ``Session(anchor=...)``: None -> ``<ledger>.anchor``, False -> none, or a path."""
    if anchor is False or path is None:
        if anchor not in (None, False):
            raise InvalidInputError(
                "anchor= needs a ledger file (an in-memory ledger has nothing to anchor); "
                "pass anchor=None. Nothing was charged."
            )
        return None
    if anchor is None or anchor is True:
        return f"{path}.anchor"
    if isinstance(anchor, (str, os.PathLike)) and not isinstance(anchor, bytes) and anchor:
        return os.fspath(anchor)
    raise InvalidInputError(
        f"anchor={anchor!r} must be None (a file next to the ledger), False (no anchor) or the "
        "path of the anchor file. Nothing was charged."
    )


class Anchor:
    """The chain head ``(seq, hash)`` kept in a file outside the ledger database.

    Written after a write transaction commits (temp file, fsync, ``os.replace``) and only
    forwards: a writer whose head is not beyond the anchored one leaves the file alone. A crash
    before the update leaves the anchor behind the ledger, which is fine: the check is that the
    ledger *contains* the anchored row with the anchored hash. The directory is not fsynced
    (one fsync less per write): after a power loss the rename may be undone, which leaves the
    previous, complete anchor, i.e. again one behind.
    """

    def __init__(self, path: str) -> None:
        self.path = path

    def read(self) -> dict[str, Any] | None:
        """Return the anchored head, or None when there is no anchor file yet."""
        try:
            text = Path(self.path).read_text()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise LedgerCorruptError(
                f"the ledger anchor {self.path!r} cannot be read ({exc}). Fix its permissions, "
                "or pass anchor=False to open the ledger without it. Nothing was charged."
            ) from exc
        try:
            a = json.loads(text)
            ok = (
                a.get("schema") == ANCHOR_SCHEMA
                and isinstance(a.get("seq"), int)
                and isinstance(a.get("hash"), str)
                and len(a["hash"]) == 64
            )
        except (ValueError, AttributeError):
            ok = False
        if not ok:
            raise LedgerCorruptError(
                f"the ledger anchor {self.path!r} is not a gpframe anchor file. Restore it, or "
                "point anchor= at the right file. Nothing was charged."
            )
        return a

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        if fcntl is None:
            yield
            return
        # lock the anchor's directory (no lock file to leave behind); the anchor file itself
        # cannot carry the lock, os.replace swaps its inode
        fd = os.open(os.path.dirname(os.path.abspath(self.path)), os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    def advance(self, seq: int, digest: str, chain: str) -> None:
        """Record ``(seq, digest)`` if it is beyond the anchored head."""
        with self._locked():
            cur = self.read()
            if cur is not None and cur["seq"] >= seq:
                return
            text = json.dumps(
                {"schema": ANCHOR_SCHEMA, "seq": seq, "hash": digest, "chain": chain},
                sort_keys=True,
            )
            tmp = f"{self.path}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
            replaced = False
            try:
                with open(tmp, "w") as f:
                    f.write(text + "\n")
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, self.path)
                replaced = True
            finally:
                if not replaced:  # after the rename there is no temp file left to remove
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(tmp)
