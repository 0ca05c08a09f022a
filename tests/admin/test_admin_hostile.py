"""The admin against whatever Redis holds and whatever a request asks: corrupt, foreign and
extreme data in every key delayqueue keeps, queue names a browser rewrites, secrets in the
Redis URL, users without permissions. No page may answer 500."""

from __future__ import annotations

import os
import pickle
from collections.abc import Iterator
from typing import Any
from urllib.parse import urljoin, urlsplit

import pytest
import redis
from django.contrib import admin
from django.contrib.contenttypes.models import ContentType
from django.test import Client, override_settings

from delayqueue.engine.keys import current_minute, global_keys, queue_keys
from delayqueue.models import DelayedJob
from tests.support.admin_pages import Q, messages_of, post, text, url, user_client
from tests.support.states import make_dead, make_inflight, schedule, score

pytestmark = pytest.mark.django_db

BEFORE_YEAR_1 = -62_135_596_800_001  # ms: 0000-12-31T23:59:59.999Z
AFTER_YEAR_9999 = 253_402_300_800_000  # ms: 10000-01-01T00:00:00Z
SCORES = [
    float("inf"),
    float("-inf"),
    1e300,
    -1e300,
    BEFORE_YEAR_1,
    BEFORE_YEAR_1 + 2,
    AFTER_YEAR_9999,
    AFTER_YEAR_9999 - 1,
    -62_135_596_800_000 + 3_600_000,  # 0001-01-01T01:00Z: before year 1 in New York
    253_402_300_799_999 - 3_600_000,
    0,
    -1,
    2**63,
    0.5,
]
PICKLE = pickle.dumps({"planted": 1}, protocol=4)
NOT_UTF8 = b"\xff\xfe\x80 not utf-8 \xc3"
HOSTILE_HIST = [
    b"[",
    b"{}",
    b"[1, 2, null]",
    b'[{"at": 1e400, "attempt": 1e400}]',
    b'[{"at": "x", "attempt": [], "outcome": {}, "detail": null}]',
    b'[{"at": -1e20}, {"at": 99999999999999999999999}, {"at": true}]',
    b"[" * 50_000,
    NOT_UTF8,
]


def raw_redis() -> redis.Redis:
    return redis.Redis(port=int(os.environ["DQ_TEST_REDIS_PORT"]))  # bytes in, bytes out


def ulid(n: int) -> str:
    return f"01HZZZZZZZZZZZZZZZZZZZZ{n:03d}"


def plant_jobs(raw: redis.Redis, queue: str = Q) -> list[str]:
    """Jobs of every corrupt shape in every state; the valid-looking ids planted."""
    k = queue_keys(queue)
    raw.sadd(global_keys().queues, queue)
    ids = []
    n = 0
    hashes: list[dict[Any, Any]] = [
        {"task": NOT_UTF8, "args": PICKLE, "kwargs": NOT_UTF8, "why": NOT_UTF8},
        {"task": "tests.support.jobs.record", "args": "not json", "kwargs": "[1]", "err": NOT_UTF8},
        {"att": "x", "max": "nan", "vt": "1e300", "tok": NOT_UTF8, "tb": b"x" * 300_000},
        {"att": "1e400", "max": "-inf", "vt": "inf", "key": NOT_UTF8 + b" \n"},
        {"args": "[" * 100_000, "kwargs": "{" * 10, "att": "9" * 5000},
        {"args": '"' + "a" * 2_000_000 + '"'},
    ]
    hashes += [{"task": "t", "hist": hist} for hist in HOSTILE_HIST]
    for state in ("scheduled", "inflight", "dead"):
        zset = getattr(k, state)
        for fields in hashes:
            n += 1
            raw.hset(k.job(ulid(n)), mapping=fields)
            raw.zadd(zset, {ulid(n): SCORES[n % len(SCORES)]})
            ids.append(ulid(n))
        for value in SCORES:
            n += 1
            raw.zadd(zset, {ulid(n): value})  # and no hash at all
            ids.append(ulid(n))
        for member in [b"", b"a/b", b"../..", NOT_UTF8, b"x" * 100_000, b"<b>", b"%2F", b" "]:
            raw.zadd(zset, {member: 1})
    # packed specs of never-claimed jobs: malformed, non-UTF-8, wrong field counts
    for spec in [b"", b"no newlines", b"\n" * 20, NOT_UTF8 + b"\n" + PICKLE, b"t\n[\n{\nx\ny\n"]:
        n += 1
        raw.hset(k.spec_bucket(ulid(n)), ulid(n), spec)
        raw.zadd(k.scheduled, {ulid(n): 5})
        ids.append(ulid(n))
    # a job key of the wrong type, in every state
    for state in ("scheduled", "inflight", "dead"):
        n += 1
        raw.set(k.job(ulid(n)), "a string")
        raw.zadd(getattr(k, state), {ulid(n): 7})
        ids.append(ulid(n))
    raw.hset(
        k.dedupe,
        mapping={"k": ulid(1), "gone": "nothing", "bad": NOT_UTF8, "": "", NOT_UTF8: ulid(2)},
    )
    raw.hset(k.paused, "not", "a string")
    minute = current_minute()
    for back in range(3):
        raw.hset(
            k.stats(minute - back), mapping={"dispatched": "x", "acked": "nan", "dead": "9e99"}
        )
    raw.hset(k.stats(minute - 3), mapping={"dispatched": "9" * 400, "failed": NOT_UTF8})
    raw.rpush(k.stats(minute - 4), "a list")
    # workers: junk ids, extreme heartbeats, hashes of junk or of the wrong type
    raw.zadd(
        global_keys().workers,
        {b"w1": float("inf"), NOT_UTF8: -1e300, b"": BEFORE_YEAR_1, b"w2": 1, b"w3": 2},
    )
    raw.hset(
        global_keys().worker("w1"), mapping={"host": NOT_UTF8, "pid": PICKLE, "queues": NOT_UTF8}
    )
    not_utf8_worker = global_keys().worker("").encode() + NOT_UTF8
    raw.hset(not_utf8_worker, mapping={"dispatched": "x", "beat": "1e400"})
    raw.hset(global_keys().worker(""), mapping={"beat": str(AFTER_YEAR_9999), "queues": ",,,"})
    raw.set(global_keys().worker("w2"), "a string")
    raw.hset(global_keys().worker("w3"), mapping={"beat": "-99999999999999999999"})
    raw.sadd(global_keys().queues, NOT_UTF8, b"", b"a/b", b"x" * 1000, b"{x}")
    return ids


def plant_wrong_types(raw: redis.Redis) -> None:
    """Every key of a queue, and the global ones, of a type delayqueue never writes there."""
    raw.hset(global_keys().queues, "tests", "1")
    raw.set(global_keys().workers, "a string")
    for queue in ("tests", "other"):
        k = queue_keys(queue)
        raw.set(k.scheduled, "a string")
        raw.hset(k.inflight, "a", "hash")
        raw.rpush(k.dead, "a list")
        raw.set(k.spec_bucket(ulid(1)), "a string")  # the specs bucket of the job shown
        raw.sadd(k.dedupe, "a set")
        raw.rpush(k.stats(current_minute()), "a list")


def every_page(ids: list[str], queue: str = Q) -> list[str]:
    pages = [
        url("changelist"),
        url("changelist") + f"?chart={queue}",
        url("changelist") + "?chart=%FF",
        url("changelist") + "?chart=..",
    ]
    for state in ("scheduled", "inflight", "dead"):
        base = url("list", queue, state)
        pages += [
            base,
            base + "?order=desc",
            base + "?page=2",
            base + "?q=k",
            base + "?q=+k+",
            base + f"?q={ulid(1)}",
            base + f"?q={ulid(1).lower()}",
            base + "?q=record",
            base + "?q=%FF%FE",
            base + "?task=t",
            base + "?task=t&q=x&order=desc",
        ]
    pages += [url("job", queue, job_id) for job_id in ids]
    return pages


def assert_no_500(client: Client, pages: list[str]) -> None:
    failed = []
    for page in pages:
        response = client.get(page)
        if response.status_code >= 500 or response.status_code not in (200, 404):
            failed.append((page[:120], response.status_code))
    assert not failed, failed


@pytest.fixture
def hostile() -> Iterator[list[str]]:
    raw = raw_redis()
    ids = plant_jobs(raw)
    yield ids
    raw.close()


# ---- any data in Redis ------------------------------------------------------------------


@pytest.mark.parametrize("zone", ["UTC", "America/New_York", "Pacific/Kiritimati"])
def test_every_page_renders_whatever_redis_holds(admin_client, r, hostile, zone):
    with override_settings(TIME_ZONE=zone):
        assert_no_500(admin_client, every_page(hostile))
        dashboard = admin_client.get(url("changelist"))
        assert dashboard.status_code == 200
        dead = admin_client.get(url("list", Q, "dead"))
        assert dead.status_code == 200
        assert r"\xff\xfe\x80 not utf-8" in text(dead)


def test_every_page_renders_keys_of_the_wrong_type(admin_client, r):
    raw = raw_redis()
    plant_wrong_types(raw)
    pages = every_page([ulid(1)]) + every_page([ulid(1)], "other")
    assert_no_500(admin_client, pages)
    page = text(admin_client.get(url("list", Q, "scheduled")))
    assert "holds a string" in page
    # and the confirm step and actions of every kind answer, never 500
    for action in ("retry_all", "purge_all", "pause", "resume"):
        for confirmed in ("", "yes"):
            response = post(admin_client, action, confirmed=confirmed)
            assert response.status_code in (200, 503), (action, confirmed)
    for action in ("run_now", "cancel", "force_back", "retry", "delete"):
        response = post(admin_client, action, ulid(1), confirmed="yes")
        assert response.status_code in (200, 503), action


def test_the_job_page_shows_non_utf8_data_escaped(admin_client, r, hostile):
    response = admin_client.get(url("job", Q, ulid(1)))
    assert response.status_code == 200
    page = text(response)
    assert r"\xff\xfe\x80 not utf-8 \xc3" in page  # task and reason, shown escaped
    assert r"\x80" in page and r"\x95" in page and "planted" in page  # the pickle, as stored
    assert "not valid JSON" in page


def test_a_job_whose_key_is_not_a_hash_is_shown_as_such(admin_client, r):
    raw = raw_redis()
    raw.set(queue_keys(Q).job(ulid(1)), "a string")
    raw.zadd(queue_keys(Q).dead, {ulid(1): 5})
    page = admin_client.get(url("job", Q, ulid(1)))
    assert page.status_code == 200
    assert "holds a string" in text(page)


@pytest.mark.parametrize("when", [BEFORE_YEAR_1, AFTER_YEAR_9999, 1e300, float("-inf")])
@override_settings(TIME_ZONE="America/New_York")
def test_any_score_renders_as_a_time_or_as_what_it_is(admin_client, r, when):
    job = schedule("a")
    raw_redis().zadd(queue_keys(Q).scheduled, {job.id: when})
    for page in (url("list", Q, "scheduled"), url("job", Q, job.id), url("changelist")):
        response = admin_client.get(page)
        assert response.status_code == 200, page
        shown = text(response)
        assert any(w in shown for w in ("not a time", "before year 1", "after year 9999")), page


def test_extreme_but_valid_times_render_in_new_york(admin_client, r):
    job = schedule("a")
    first_ms = -62_135_596_800_000  # 0001-01-01T00:00Z: the year before 1 in New York
    raw_redis().zadd(queue_keys(Q).scheduled, {job.id: first_ms})
    with override_settings(TIME_ZONE="America/New_York"):
        page = text(admin_client.get(url("job", Q, job.id)))
    assert "0001-01-01 00:00:00 UTC" in page


def test_retry_all_with_non_utf8_dead_jobs(admin_client, r):
    good = make_dead("fine")
    plant_jobs(raw_redis())
    response = post(admin_client, "retry_all", confirmed="yes")
    assert response.status_code == 200
    assert score(r, queue_keys(Q).scheduled, good.id) is not None


def test_members_that_are_no_job_id_are_listed_without_a_link(admin_client, r):
    raw = raw_redis()
    raw.sadd(global_keys().queues, Q)
    for state in ("scheduled", "inflight", "dead"):
        raw.zadd(getattr(queue_keys(Q), state), {b"a/b": 1, b"": 2, NOT_UTF8: 3})
    for state in ("scheduled", "inflight", "dead"):
        response = admin_client.get(url("list", Q, state))
        assert response.status_code == 200, state
        assert "a/b" in text(response) and "not a job id" in text(response)


# ---- secrets ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "redis_url",
    [
        "redis://127.0.0.1:1/0?password=hunter2secret",
        "redis://user:hunter2secret@127.0.0.1:1/0",
        "redis://:hunter2secret@127.0.0.1:1/0?socket_timeout=1",
        "redis://127.0.0.1:1/0?db=0&password=hunter2secret",
        "redis://user:hunter2secret@127.0.0.1:1/0?password=hunter2secret",
        "redis://user:hunter2secret@127.0.0.1:1/0?socket_timeout=1&password=hunter2secret",
    ],
)
def test_no_form_of_the_redis_password_shows_on_the_503_page(admin_client, redis_url):
    with override_settings(DELAYQUEUE={"REDIS_URL": redis_url, "SOCKET_TIMEOUT": 1}):
        for page in (url("changelist"), url("list", Q, "scheduled")):
            response = admin_client.get(page)
            assert response.status_code == 503
            body = text(response)
            assert "hunter2secret" not in body and "hunter2" not in body
            assert "127.0.0.1" in body  # still says which Redis


def test_redaction_of_sentinel_style_and_other_urls():
    from delayqueue.redaction import redact

    for raw_url in [
        "sentinel://:hunter2secret@h1:26379;sentinel://:hunter2secret@h2:26379",
        "redis+sentinel://u:hunter2secret@h1:26379,h2:26379/mymaster/0?sentinel_password=s3cr3tz",
        "redis://h:1/0?x=1&secret=s3cr3tz&token=s3cr3tz&api_key=s3cr3tz",
        "unix://:hunter2secret@/tmp/redis.sock?db=0&password=s3cr3tz",
    ]:
        shown = redact(f"Redis at {raw_url} did not answer", raw_url)
        assert "hunter2" not in shown and "s3cr3tz" not in shown, shown
        assert "did not answer" in shown
    # a message that repeats the password elsewhere loses it too
    assert "hunter2secret" not in redact(
        "AUTH hunter2secret failed", "redis://:hunter2secret@h:1/0"
    )


# ---- permissions first ------------------------------------------------------------------


@override_settings(DELAYQUEUE={"REDIS_URL": "redis://127.0.0.1:1/0", "SOCKET_TIMEOUT": 1})
def test_actions_check_permissions_before_asking_redis(django_user_model):
    staff = user_client(django_user_model, "staff")
    changer = user_client(django_user_model, "changer", "change_jobs", "delete_jobs")
    for client in (staff, changer):
        for queue in (Q, "nosuchqueue"):
            for action in ("pause", "run_now", "retry_all", "purge_all", "", "explode"):
                response = client.post(url("act", queue), {"action": action, "ids": [ulid(1)]})
                assert response.status_code == 403, (queue, action)


def test_an_unknown_queue_and_a_known_one_look_alike_without_permission(django_user_model, r):
    schedule("a")
    staff = user_client(django_user_model, "staff")
    known = staff.post(url("act", Q), {"action": "pause"})
    unknown = staff.post(url("act", "nosuchqueue"), {"action": "pause"})
    assert known.status_code == unknown.status_code == 403
    assert not r.exists(queue_keys(Q).paused)


def test_an_action_needs_the_view_permission_too(django_user_model, r):
    job = schedule("a")
    due = score(r, queue_keys(Q).scheduled, job.id)
    blind = user_client(django_user_model, "blind", "change_jobs", "delete_jobs")
    assert blind.post(url("act", Q), {"action": "run_now", "ids": [job.id]}).status_code == 403
    assert score(r, queue_keys(Q).scheduled, job.id) == due


def test_actions_refuse_get_and_other_methods(admin_client, r):
    for method in ("get", "put", "delete", "head"):
        response = getattr(admin_client, method)(url("act", Q))
        assert response.status_code == 405, method


@override_settings(DELAYQUEUE={"REDIS_URL": "redis://127.0.0.1:1/0", "SOCKET_TIMEOUT": 1})
def test_the_views_that_change_state_are_post_only_and_check_permission_first(
    django_user_model,
):
    """The admin entry's URLs: pages that only read, one endpoint for every action on jobs
    and queues and one for every action on schedules, each of which refuses any other method
    than POST, then any user without the permissions, before Redis (unreachable here) is
    asked anything."""
    entry = admin.site.get_model_admin(DelayedJob)
    names = {pattern.name for pattern in entry.get_urls()}
    pages = ("changelist", "act", "job", "list", "schedules", "schedule_act", "limits")
    assert names == {f"delayqueue_delayedjob_{n}" for n in pages}
    staff = user_client(django_user_model, "staff")
    for act, action in ((url("act", Q), "pause"), (url("schedule_act"), "run_now")):
        for method in ("get", "put", "patch", "delete", "head", "options"):
            assert getattr(staff, method)(act).status_code == 405, (act, method)
        assert staff.post(act, {"action": action, "name": "x"}).status_code == 403, act


# ---- the model has no table -------------------------------------------------------------


def test_the_admin_shortcut_to_a_delayed_job_is_a_404(admin_client, r):
    content_type = ContentType.objects.get_for_model(DelayedJob)
    for object_id in ("1", "x", "01HZZZZZZZZZZZZZZZZZZZZ001"):
        response = admin_client.get(f"/admin/r/{content_type.pk}/{object_id}/")
        assert response.status_code == 404, object_id


def test_the_model_never_touches_the_database():
    assert list(DelayedJob.objects.all()) == []
    assert DelayedJob.objects.count() == 0
    with pytest.raises(DelayedJob.DoesNotExist):
        DelayedJob._base_manager.get(pk=1)


# ---- every valid queue name has pages ---------------------------------------------------


def browser_path(path: str) -> str:
    """The path a browser requests for a link: dot segments removed (RFC 3986 5.2.4, which
    the WHATWG URL standard follows; it treats %2e as a dot too)."""
    for dot in ("%2e", "%2E"):
        path = path.replace(dot, ".")
    return urlsplit(urljoin("http://testserver/", path)).path


@pytest.mark.parametrize("queue", [".", "..", "...", ".-", "-", "_", "job", "actions"])
def test_every_valid_queue_name_is_reachable_from_a_browser(admin_client, r, queue):
    job = schedule("a", queue=queue)
    dead = schedule("d", queue=queue)
    k = queue_keys(queue)
    r.zrem(k.scheduled, dead.id)
    r.zadd(k.dead, {dead.id: 1})
    pages = {
        url("list", queue, "scheduled"): job.id,
        url("list", queue, "dead"): dead.id,
        url("job", queue, job.id): "tests.support.jobs.record",
    }
    for page, expected in pages.items():
        assert browser_path(page) == page, page
        response = admin_client.get(page)
        assert response.status_code == 200, page
        assert response.context["queue"] == queue
        assert expected in text(response)
    dashboard = text(admin_client.get(url("changelist")))
    assert url("list", queue, "scheduled") in dashboard
    action = url("act", queue)
    assert browser_path(action) == action
    done = admin_client.post(action, {"action": "run_now", "ids": [job.id]}, follow=True)
    assert f"Job {job.id} (tests.support.jobs.record) will run now." in messages_of(done)


# ---- search and bad input ---------------------------------------------------------------


def test_a_dedupe_key_with_surrounding_spaces_is_found_exactly(admin_client, r):
    spaced = schedule("a", key="  order:7 ")
    plain = schedule("b", key="order:7")
    found = admin_client.get(url("list", Q, "scheduled"), {"q": "  order:7 "})
    assert [row.id for row in found.context["page"].rows] == [spaced.id]
    assert "Found by exact dedupe key" in text(found)
    other = admin_client.get(url("list", Q, "scheduled"), {"q": "order:7"})
    assert [row.id for row in other.context["page"].rows] == [plain.id]
    by_id = admin_client.get(url("list", Q, "scheduled"), {"q": f"  {spaced.id.lower()} "})
    assert [row.id for row in by_id.context["page"].rows] == [spaced.id]


@pytest.mark.parametrize(
    "query",
    [
        "page=abc",
        "page=-1",
        "page=%FF",
        "page=99999999999999999999",
        "page=1e3",
        "order=%00",
        "q=" + "x" * 201,
        "task=" + "x" * 201,
    ],
)
def test_bad_list_queries_are_a_404_with_a_message(admin_client, r, query):
    schedule("a")
    response = admin_client.get(url("list", Q, "scheduled") + "?" + query)
    assert response.status_code == 404
    assert "Back to the delayed jobs dashboard" in text(response)


@pytest.mark.parametrize(
    "path",
    [
        "nosuchqueue/scheduled/",
        "%FF/scheduled/",
        "~/scheduled/",
        "~x/scheduled/",
        "~.../scheduled/",
        f"{'x' * 65}/scheduled/",
        "tests/job/01HZZZZZZZZZZZZZZZZZZZZ001/",
        "tests/job/%FF/",
        "tests/job/ZZZZZZZZZZZZZZZZZZZZZZZZZZ/",
        "nosuchqueue/job/01HZZZZZZZZZZZZZZZZZZZZ001/",
    ],
)
def test_bad_paths_are_a_404_with_a_message(admin_client, r, path):
    schedule("a")
    response = admin_client.get(url("changelist") + path)
    assert response.status_code == 404, path
    assert "Back to the delayed jobs dashboard" in text(response)


def test_bad_posts_are_a_404_or_a_message(admin_client, r):
    job = schedule("a")
    for ids in (["%FF"], [""], ["x" * 10_000]):
        response = admin_client.post(url("act", Q), {"action": "run_now", "ids": ids})
        assert response.status_code == 404, ids
    for delay in ("nan", "inf", "-0", "1e308", "", "٣"):
        response = post(admin_client, "reschedule", job.id, delay=delay, unit="days")
        assert response.status_code == 200, delay
    response = post(admin_client, "reschedule", job.id, delay="1", unit="fortnights")
    assert any("is not a delay" in m for m in messages_of(response))


def test_inflight_job_pages_link_every_job(admin_client, r):
    job = make_inflight("f")
    page = text(admin_client.get(url("list", Q, "inflight")))
    assert url("job", Q, job.id) in page


# ---- Redis refusing ---------------------------------------------------------------------


def _refusals() -> list[Exception]:
    from delayqueue import errors

    found: list[Exception] = [
        redis.exceptions.ReadOnlyError("You can't write against a read only replica."),
        redis.exceptions.ResponseError("OOM command not allowed when used memory > 'maxmemory'."),
        redis.exceptions.NoPermissionError("this user has no permissions to run the 'zcard'"),
        redis.exceptions.BusyLoadingError("Redis is loading the dataset in memory"),
        errors.DelayQueueError("a Redis script failed: ERR something"),
    ]
    for name in ("RedisOutOfMemory", "RedisReadOnly", "RedisPermissionDenied", "RedisLoading"):
        if hasattr(errors, name):
            found.append(getattr(errors, name)(f"{name}: refused"))
    return found


@pytest.mark.parametrize("refusal", _refusals(), ids=lambda e: type(e).__name__)
def test_redis_refusing_is_a_clean_503_on_every_page(admin_client, r, monkeypatch, refusal):
    job = schedule("a")

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise refusal

    monkeypatch.setattr("delayqueue.engine.reads.Reads.run", refuse)  # every read-only query
    for page in (url("changelist"), url("list", Q, "dead"), url("job", Q, job.id)):
        response = admin_client.get(page)
        assert response.status_code == 503, page
        assert "Back to the delayed jobs dashboard" in text(response)
        assert str(refusal)[:20] in text(response).replace("&#x27;", "'")


def test_action_messages_name_jobs_of_any_data_briefly_and_escaped(admin_client, r):
    """A task name or key of any bytes and length: the message names it on one short line."""
    raw = raw_redis()
    k = queue_keys(Q)
    raw.sadd(global_keys().queues, Q)
    huge, odd, wrong = ulid(1), ulid(2), ulid(3)
    raw.hset(k.job(huge), mapping={"task": "t" * 10_000, "key": b"<b>" + b"k\n" * 5_000})
    raw.hset(k.job(odd), mapping={"task": NOT_UTF8})
    raw.set(k.job(wrong), "a string")  # a job key of the wrong type: named by its id alone
    for job_id in (huge, odd, wrong):
        raw.zadd(k.dead, {job_id: 1})
    response = post(admin_client, "delete", huge, odd, wrong, confirmed="yes")
    assert response.status_code == 200
    (message,) = messages_of(response)
    assert message.startswith(f"3 jobs deleted: {huge} (ttttt")
    assert "key “<b>k k k" in message and "\n" not in message
    assert f"{odd} (\\xff\\xfe\\x80 not utf-8 \\xc3); {wrong}." in message
    assert len(message) < 500
    body = text(response)
    assert "<b>k" not in body and "&lt;b&gt;k k" in body
    raw.close()
