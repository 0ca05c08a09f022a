"""How fast the delayed-jobs admin pages render with a big queue.

``.venv/bin/python -m bench.admin_pages [--jobs 1000000] [--dead 100000] [--repeat 7]``

Starts a private redis-server, fills queue "big" with ``--jobs`` scheduled jobs (a Lua loop,
100,000 jobs per call) plus dead and in-flight ones, then renders the dashboard, every list
page (first page, a deep page, newest first, each kind of search) and a job page through
Django's test client — the whole request: middleware, permission checks, Redis, templates —
and prints the median and worst time of each.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any

FILL = """
-- KEYS[1] zset to fill    KEYS[2] job hash prefix    KEYS[3] dedupe hash
-- ARGV[1] first index     ARGV[2] how many           ARGV[3] first score ms
-- ARGV[4] score spread ms ARGV[5] 16-char id prefix  ARGV[6] "dead" to add an error
local alphabet = '0123456789ABCDEFGHJKMNPQRSTVWXYZ'
local tasks = {'orders_demo.tasks.close_unpaid_order', 'tests.support.jobs.record',
               'bench.fake.report'}
local first, count = tonumber(ARGV[1]), tonumber(ARGV[2])
local base, spread = tonumber(ARGV[3]), tonumber(ARGV[4])
for i = first, first + count - 1 do
  local n, suffix = i, ''
  for _ = 1, 10 do
    local d = n % 32
    suffix = string.sub(alphabet, d + 1, d + 1) .. suffix
    n = math.floor(n / 32)
  end
  local id = ARGV[5] .. suffix
  local job = KEYS[2] .. id
  local key = 'order:' .. i
  if ARGV[6] ~= 'scheduled' then key = ARGV[6] .. '-order:' .. i end
  redis.call('HSET', job, 'task', tasks[i % 3 + 1], 'args', '[' .. i .. ', "<b>x</b>"]',
             'max', '5', 'key', key)
  if ARGV[6] == 'dead' then
    redis.call('HSET', job, 'att', '5', 'why', 'failed 5 of 5 attempts',
               'err', 'ValueError: boom ' .. i,
               'tb', 'Traceback (most recent call last):\\n  ...\\nValueError: boom')
  else
    redis.call('HSET', KEYS[3], key, id)
  end
  redis.call('ZADD', KEYS[1], base + (i * 7919) % spread, id)
end
return count
"""

QUEUE = "big"
CHUNK = 100_000


def _ulid_time_prefix(ms: int) -> str:
    alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
    out = ""
    for _ in range(10):
        out = alphabet[ms % 32] + out
        ms //= 32
    return out


def fill(client: Any, zset: str, prefix: str, dedupe: str, count: int, **kw: Any) -> float:
    """Add ``count`` jobs to ``zset``; seconds it took."""
    script = client.register_script(FILL)
    started = time.perf_counter()
    now_ms = int(time.time() * 1000)
    id_prefix = _ulid_time_prefix(now_ms) + kw.get("tag", "000000")
    for first in range(0, count, CHUNK):
        script(
            keys=[zset, prefix, dedupe],
            args=[
                first,
                min(CHUNK, count - first),
                now_ms + kw.get("offset_ms", 60_000),
                kw.get("spread_ms", 24 * 3600_000),
                id_prefix,
                kw.get("kind", "scheduled"),
            ],
        )
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.admin_pages", description=__doc__)
    parser.add_argument("--jobs", type=int, default=1_000_000, help="scheduled jobs in the queue")
    parser.add_argument("--dead", type=int, default=100_000, help="dead jobs in the queue")
    parser.add_argument("--repeat", type=int, default=7, help="renders of each page")
    options = parser.parse_args(argv)

    from tests.support.redis_server import RedisServer

    server = RedisServer().start()
    workdir = tempfile.mkdtemp(prefix="dq-bench-admin-")
    try:
        os.environ.update(
            DQ_TEST_REDIS_PORT=str(server.port),
            DQ_TEST_REDIS_RUN_ID=str(server.run_id),
            DQ_TEST_DIR=workdir,
            DJANGO_SETTINGS_MODULE="tests.settings",
        )
        return run(server, options)
    finally:
        server.cleanup()
        shutil.rmtree(workdir, ignore_errors=True)


def run(server: Any, options: argparse.Namespace) -> int:
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.test import Client
    from django.urls import reverse

    from delayqueue.engine.keys import queue_keys

    call_command("migrate", verbosity=0)
    user = get_user_model().objects.create_superuser("bench", "bench@example.com", "pw")
    client = Client()
    client.force_login(user)

    redis = server.client()
    keys = queue_keys(QUEUE)
    redis.sadd("dq:queues", QUEUE, "small", "empty")
    print(f"filling queue {QUEUE!r}: {options.jobs:,} scheduled, {options.dead:,} dead ...")
    took = fill(redis, keys.scheduled, keys.job_prefix, keys.dedupe, options.jobs)
    print(f"  scheduled: {took:.1f} s ({options.jobs / took:,.0f} jobs/s)")
    took = fill(
        redis, keys.dead, keys.job_prefix, keys.dedupe, options.dead,
        kind="dead", tag="DEAD00", offset_ms=-3 * 24 * 3600_000, spread_ms=3 * 24 * 3600_000,
    )  # fmt: skip
    print(f"  dead: {took:.1f} s")
    fill(redis, keys.inflight, keys.job_prefix, keys.dedupe, 1000, kind="inflight", tag="FLY000")
    small = queue_keys("small")
    fill(redis, small.scheduled, small.job_prefix, small.dedupe, 500, tag="SMALL0")
    memory = redis.info("memory")["used_memory_human"]
    print(f"  Redis holds {redis.dbsize():,} keys, {memory}")

    middle = min(500_000, options.jobs // 2)
    some_id = redis.zrange(keys.scheduled, middle, middle)[0]
    deep = max(1, options.jobs // 50 // 2)  # the middle page

    def url(name: str, *args: str) -> str:
        return reverse(f"admin:delayqueue_delayedjob_{name}", args=args)

    scheduled, dead = url("list", QUEUE, "scheduled"), url("list", QUEUE, "dead")
    pages = [
        ("dashboard (3 queues, chart, workers)", url("changelist")),
        ("scheduled, first page", scheduled),
        (f"scheduled, deep page {deep:,}", f"{scheduled}?page={deep}"),
        ("scheduled, newest first", f"{scheduled}?order=desc"),
        ("scheduled, last page newest first", f"{scheduled}?order=desc&page={deep * 2}"),
        ("search: exact job id", f"{scheduled}?q={some_id}"),
        ("search: exact dedupe key", f"{scheduled}?q=order:123456"),
        ("search: task text (bounded scan)", f"{scheduled}?q=report"),
        ("filter: exact task (bounded scan)", f"{scheduled}?task=tests.support.jobs.record"),
        ("in flight, first page", url("list", QUEUE, "inflight")),
        ("dead, first page (newest)", dead),
        (f"dead, deep page {options.dead // 100:,}", f"{dead}?page={max(1, options.dead // 100)}"),
        ("job detail", url("job", QUEUE, some_id)),
    ]
    print(f"\nrender times, {options.repeat} runs each (median / worst), Django test client:")
    worst_median = 0.0
    for label, path in pages:
        times = []
        for _ in range(options.repeat):
            started = time.perf_counter()
            response = client.get(path)
            times.append(time.perf_counter() - started)
            if response.status_code != 200:
                print(f"  {label}: HTTP {response.status_code} for {path}", file=sys.stderr)
                return 1
        median = statistics.median(times)
        worst_median = max(worst_median, median)
        print(f"  {label:<42} {median * 1000:8.1f} ms / {max(times) * 1000:8.1f} ms")
    print(f"\nslowest page (median): {worst_median * 1000:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
