"""Unit tests of gpframe.ledger.integrity: the id encoding, the anchor file, the key."""

from __future__ import annotations

import json

import numpy as np
import pytest

from gpframe.errors import InvalidInputError, LedgerCorruptError
from gpframe.ledger.integrity import Anchor, Chain, anchor_path, load_key, uid_bytes


def _ref(uids):
    out = b""
    for u in uids:
        if isinstance(u, str):
            b = u.encode("utf-8", "surrogatepass")
            out += b"s" + len(b).to_bytes(4, "little") + b
        else:
            out += b"i" + int(u).to_bytes(8, "little", signed=True)
    return out


@pytest.mark.parametrize(
    "uids",
    [
        [0, 1, -1, 2**63 - 1, -(2**63)],
        ["ann", "", "é", "\udc80", "x" * 300, "1"],
        [1, "1", 7, "seven"],
    ],
)
def test_uid_bytes_is_the_same_however_the_ids_are_batched(uids):
    whole = uid_bytes(uids)
    assert whole == _ref(uids)
    for cut in range(len(uids) + 1):
        assert uid_bytes(uids[:cut]) + uid_bytes(uids[cut:]) == whole
    if all(isinstance(u, int) for u in uids):
        assert uid_bytes(np.array(uids, dtype=np.int64)) == whole


def test_int_and_str_ids_encode_differently():
    assert uid_bytes([1]) != uid_bytes(["1"])
    assert uid_bytes(["ab", "c"]) != uid_bytes(["a", "bc"])


def test_anchor_moves_only_forward_and_rejects_garbage(tmp_path):
    a = Anchor(str(tmp_path / "l.anchor"))
    assert a.read() is None
    a.advance(5, "ab" * 32, "sha256")
    a.advance(3, "cd" * 32, "sha256")  # a late writer with an older head
    assert (a.read()["seq"], a.read()["hash"]) == (5, "ab" * 32)
    a.advance(6, "ef" * 32, "sha256")
    assert a.read()["seq"] == 6
    assert sorted(p.name for p in tmp_path.iterdir()) == ["l.anchor"]  # no temp or lock file
    (tmp_path / "l.anchor").write_text(json.dumps({"seq": "6"}))
    with pytest.raises(LedgerCorruptError, match="not a gpframe anchor"):
        a.read()


def test_anchor_path_choices(tmp_path):
    assert anchor_path("/x/l.sqlite", None) == "/x/l.sqlite.anchor"
    assert anchor_path("/x/l.sqlite", False) is None
    assert anchor_path("/x/l.sqlite", tmp_path / "a") == str(tmp_path / "a")
    assert anchor_path(None, None) is None
    with pytest.raises(InvalidInputError, match="in-memory"):
        anchor_path(None, "a")
    with pytest.raises(InvalidInputError, match="anchor="):
        anchor_path("/x/l.sqlite", 3)


def test_keyed_links_differ_from_unkeyed_and_between_keys():
    prev = "00" * 32
    plain = Chain(None).link(prev, "row")
    k1, k2 = Chain(bytes(16)), Chain(bytes(range(16)))
    assert len({plain, k1.link(prev, "row"), k2.link(prev, "row")}) == 3
    assert k1.key_id() != k2.key_id()
    with pytest.raises(InvalidInputError, match="bytes or the path"):
        load_key(12345)


def test_uid_bytes_keeps_uint64_ids_above_int64_distinct():
    """A uint64 id above 2**63 - 1 is hashed as itself, not refused or folded onto a signed id."""
    from gpframe.ledger.integrity import uid_bytes

    big = 2**64 - 1
    assert uid_bytes([big]) != uid_bytes([-1])
    assert uid_bytes([big, "a"]) == uid_bytes([big]) + uid_bytes(["a"])  # batching-independent
