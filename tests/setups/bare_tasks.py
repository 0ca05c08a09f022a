"""The plain task of the set-up tests, as a service without delayqueue defines it: the same
name, its runs reported to the same Redis list, nothing of delayqueue imported."""

import os

import redis
from celery import shared_task
from redis.cluster import RedisCluster

RAN = "test:setups:ran"


@shared_task(name="setups.plain")
def plain(tag: str) -> None:
    url = os.environ["REDIS_URL"]
    cluster = os.environ.get("REDIS_CLUSTER") == "true"
    with RedisCluster.from_url(url) if cluster else redis.Redis.from_url(url) as client:
        client.rpush(RAN, tag)
