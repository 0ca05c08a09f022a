"""Job ids: ULIDs as Crockford base32, the time part cached per ms."""

from __future__ import annotations

import pytest

from delayqueue.engine import keys

CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def reference_ulid(ms: int, random: bytes) -> str:
    """The ULID spec's encoding, one 5-bit character at a time from the top of 130 bits."""
    value = ms << 80 | int.from_bytes(random, "big")
    return "".join(CROCKFORD[(value >> shift) & 31] for shift in range(125, -1, -5))


@pytest.mark.parametrize(
    ("ms", "random"),
    [
        (0, bytes(10)),
        (2**48 - 1, b"\xff" * 10),
        (1_795_000_000_123, bytes(range(10))),
        (1_795_000_000_124, b"\x80" + bytes(9)),
        (1_795_000_000_124, bytes(9) + b"\x01"),  # the same ms again: the cached time part
    ],
)
def test_an_id_is_the_ulid_of_its_ms_and_random_bits(
    monkeypatch: pytest.MonkeyPatch, ms: int, random: bytes
) -> None:
    monkeypatch.setattr(keys.time, "time_ns", lambda: ms * 1_000_000 + 999_999)
    monkeypatch.setattr(keys.os, "urandom", lambda n: random[:n])
    job_id = keys.new_job_id()
    assert job_id == reference_ulid(ms, random)
    assert keys.check_job_id(job_id) == job_id


def test_ids_sort_by_their_ms_and_differ_within_one() -> None:
    ids = [keys.new_job_id() for _ in range(2_000)]
    assert len(set(ids)) == len(ids)
    assert [i[:10] for i in ids] == sorted(i[:10] for i in ids)
