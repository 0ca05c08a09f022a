"""A rolling deploy: delay workers of this version run the jobs that producers of the
version before it wrote (its specs name their task by its path; docs/design.md, "Bytes per
job"), beside the coded ones this version writes, and the admin and the record readers show
both. (The other way round cannot work: delay workers are upgraded first, docs/upgrading.)"""

from __future__ import annotations

import pytest

from delayqueue.engine import record
from delayqueue.engine.keys import JobField, new_job_id, queue_keys
from delayqueue.producer.api import spec
from tests.support import jobs
from tests.support.admin_pages import Q, text, url
from tests.support.states import redis_ms
from tests.support.waiting import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

KEYS = queue_keys(Q)
TASK = "tests.support.jobs.record"
# What the version before this one (ed2ed18) stored for jobs.record.delay_for("old-spec"):
# the spec the producer packs (max attempts 3, from the task), as it is, in its bucket.
OLD_SPEC = TASK + '\n["old-spec"]\n\n3\n\n'


def test_this_versions_workers_run_and_show_the_jobs_the_version_before_wrote(
    celery_worker, delay_worker, r, superuser
):
    assert spec(jobs.record, ("old-spec",), delay=0).packed == OLD_SPEC  # (the producer's part)
    now = redis_ms(r)
    old_spec, old_hash = new_job_id(), new_job_id()
    r.hset(KEYS.spec_bucket(old_spec), old_spec, OLD_SPEC)
    # one of its jobs that it claimed once, whose attempt failed: back in scheduled
    r.hset(
        KEYS.job(old_hash),
        mapping={JobField.TASK: TASK, JobField.ARGS: '["old-hash"]', JobField.MAX_ATTEMPTS: "3",
                 JobField.ATTEMPTS: "1", JobField.TOKEN: "1", JobField.ERROR: "ValueError: x"},
    )  # fmt: skip
    r.zadd(KEYS.scheduled, {old_spec: now + 1_500, old_hash: now + 1_500})
    new = jobs.record.delay_for("new", seconds=1.5, on_commit=False)
    assert str(r.hget(KEYS.spec_bucket(new.id), new.id)).startswith("\x01")  # coded

    rows = record.jobs_of(KEYS, [i.encode() for i in (old_spec, old_hash, new.id)], [])
    assert [(row.task, row.args) for row in rows] == [
        (TASK, '["old-spec"]'), (TASK, '["old-hash"]'), (TASK, '["new"]')
    ]  # fmt: skip
    assert [record.read_task_name(KEYS, i) for i in (old_spec, new.id)] == [TASK, TASK]
    for job_id, tag in ((old_spec, "old-spec"), (old_hash, "old-hash"), (new.id, "new")):
        page = superuser.get(url("job", Q, job_id))
        assert page.status_code == 200
        assert TASK in text(page) and tag in text(page)
    listed = text(superuser.get(url("list", Q, "scheduled"))).replace("<wbr>", "")
    assert all(
        f"{TASK}</span>" in listed and tag in listed for tag in ("old-spec", "old-hash", "new")
    )

    delay_worker("--queues", Q)
    wait_for(lambda: len(jobs.ran("record")) >= 3, 30)
    assert sorted(str(run["tag"]) for run in jobs.ran("record")) == ["new", "old-hash", "old-spec"]
    wait_for(lambda: r.zcard(KEYS.scheduled) + r.zcard(KEYS.inflight) == 0)
    assert r.zcard(KEYS.dead) == 0
