"""An occurrence's identity: the schedule's name and the occurrence's instant, as a job id.

The id is a ULID whose time part is the instant (ms) and whose random part is the first 80
bits of the SHA-1 of the schedule's name: every delay worker, every deployment and every
retry of a step makes the same id for the same occurrence, so writing it twice writes it
once (the scripts skip an id that exists), and the job sorts by its instant as any job."""

from __future__ import annotations

import hashlib

from delayqueue.engine.keys import JOB_ID

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def _base32(value: int, length: int) -> str:
    return "".join(_CROCKFORD[(value >> (5 * i)) & 31] for i in reversed(range(length)))


def occurrence_id(name: str, instant_ms: int) -> str:
    """The job id of schedule ``name``'s occurrence at ``instant_ms`` (epoch ms, >= 0)."""
    if not 0 <= instant_ms < 1 << 48:
        raise ValueError(f"an occurrence instant must be 0 to 2**48 ms, not {instant_ms}")
    digest = int.from_bytes(hashlib.sha1(name.encode("utf-8")).digest()[:10], "big")
    job_id = _base32(instant_ms, 10) + _base32(digest, 16)
    assert JOB_ID.fullmatch(job_id)
    return job_id
