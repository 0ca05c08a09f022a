"""Connections: ``rediss://`` (TLS) and an ACL user with only the commands delayqueue needs
(docs/redis-acl.md), on a redis-server of the test's own."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from django.conf import settings
from django.test import override_settings

import delayqueue
from delayqueue import RedisPermissionDenied, RedisUnavailable
from delayqueue.engine import clients as connection
from delayqueue.engine.keys import global_keys, queue_keys
from delayqueue.runner.job import run_job
from delayqueue.worker.loop import DelayWorker
from tests.support import jobs
from tests.support.redis_server import ACL_COMMANDS, RedisServer, free_port

Q = "conn"
PASSWORD = "s3cret-pw"


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def _certificates(folder: Path) -> dict[str, Path]:
    """A CA and a server certificate for localhost / 127.0.0.1 signed by it (EC, one day)."""
    files = {name: folder / name for name in ("ca.key", "ca.crt", "srv.key", "srv.csr", "srv.crt")}
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl("req", "-x509", *ec, "-keyout", str(files["ca.key"]), "-out", str(files["ca.crt"]),
             "-days", "1", "-subj", "/CN=delayqueue test CA",
             # what Python 3.13's strict verification (VERIFY_X509_STRICT) asks of a CA
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign")  # fmt: skip
    _openssl("req", *ec, "-keyout", str(files["srv.key"]), "-out", str(files["srv.csr"]),
             "-subj", "/CN=localhost")  # fmt: skip
    ext = folder / "san.ext"
    ext.write_text(
        "subjectAltName=DNS:localhost,IP:127.0.0.1\n"
        "authorityKeyIdentifier=keyid,issuer\n"  # (strict verification: Python 3.13)
        "keyUsage=critical,digitalSignature\n"
        "extendedKeyUsage=serverAuth\n"
    )
    _openssl("x509", "-req", "-in", str(files["srv.csr"]), "-CA", str(files["ca.crt"]),
             "-CAkey", str(files["ca.key"]), "-CAcreateserial", "-out", str(files["srv.crt"]),
             "-days", "1", "-extfile", str(ext))  # fmt: skip
    return files


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A redis-server with a TLS port (and a plain one the test inspects through), and an ACL
    user ``dq`` that has only the documented commands, on ``dq:*`` keys and channels."""
    certs = _certificates(tmp_path_factory.mktemp("tls"))
    tls_port = free_port()
    srv = RedisServer(
        extra=[
            "--tls-port", str(tls_port), "--tls-cert-file", str(certs["srv.crt"]),
            "--tls-key-file", str(certs["srv.key"]), "--tls-ca-cert-file", str(certs["ca.crt"]),
            "--tls-auth-clients", "no",
        ]
    ).start()  # fmt: skip
    admin = srv.client()
    admin.execute_command(
        "ACL", "SETUSER", "dq", "reset", "on", f">{PASSWORD}", "~dq:*", "&dq:*",
        *ACL_COMMANDS.split(),
    )  # fmt: skip
    try:
        yield {"srv": srv, "admin": admin, "tls_port": tls_port, "ca": certs["ca.crt"],
               "other_ca": _certificates(tmp_path_factory.mktemp("other"))["ca.crt"]}  # fmt: skip
    finally:
        srv.cleanup()


@pytest.fixture(autouse=True)
def _empty(server: dict[str, Any]) -> None:
    server["srv"].flush()
    server["admin"].execute_command("ACL", "LOG", "RESET")


def using(url: str, **extra: Any) -> Any:
    connection.reset()
    return override_settings(DELAYQUEUE={**settings.DELAYQUEUE, "REDIS_URL": url, **extra})


def _enqueue_and_cancel(admin: redis.Redis) -> None:
    job = jobs.record.delay_for("tls", seconds=30, key="k-tls", on_commit=False)
    assert admin.zscore(queue_keys("tests").scheduled, job.id) is not None
    again = jobs.record.delay_for("tls", seconds=30, key="k-tls", on_commit=False)
    assert (again.id, again.outcome) == (job.id, "kept")
    assert jobs.record.reschedule(key="k-tls", seconds=60) is not None
    assert jobs.record.cancel(key="k-tls") is True
    assert admin.zcard(queue_keys("tests").scheduled) == 0 and not admin.exists(
        queue_keys("tests").job(job.id)
    )


def test_tls_enqueue_and_cancel(server):
    url = f"rediss://localhost:{server['tls_port']}/0?ssl_ca_certs={server['ca']}"
    with using(url):
        _enqueue_and_cancel(server["admin"])
        client = connection.get_redis()
        assert client.connection_pool.connection_class is redis.SSLConnection


def test_tls_port_speaks_only_tls(server):
    plain = redis.Redis(port=server["tls_port"], socket_timeout=0.5)
    with pytest.raises(redis.ConnectionError):
        plain.ping()


def test_tls_with_a_certificate_from_another_ca_is_refused(server):
    url = f"rediss://localhost:{server['tls_port']}/0?ssl_ca_certs={server['other_ca']}"
    with using(url, SOCKET_TIMEOUT=2.0), pytest.raises(RedisUnavailable, match="certificate"):
        jobs.record.delay_for("x", seconds=30, on_commit=False)
    assert server["admin"].dbsize() == 0


def test_acl_user_with_the_minimal_command_set_runs_the_whole_cycle(server):
    admin: redis.Redis = server["admin"]
    url = f"rediss://dq:{PASSWORD}@localhost:{server['tls_port']}/0?ssl_ca_certs={server['ca']}"
    with using(url):
        _enqueue_and_cancel(admin)
        ok = delayqueue.enqueue(jobs.record, ["ok"], delay=0, queue=Q, on_commit=False)
        bad = delayqueue.enqueue(jobs.record, ["bad"], delay=0, queue=Q, on_commit=False)
        worker = DelayWorker([Q], visibility_timeout=60)
        worker._heartbeat()  # heartbeat hash, workers zset, wake channel subscription
        result = worker.run_pass()  # reap + claim + dispatch
        claimed = {job.id: job for job in result.claimed}
        assert set(claimed) == {ok.id, bad.id}

        # The Celery side: begin + ack, and begin + fail (retry).
        assert run_job(lambda: "done", [], {}, (Q, ok.id, claimed[ok.id].token)) == "done"

        def boom() -> None:
            raise ValueError("boom")

        with pytest.raises(ValueError):
            run_job(boom, [], {}, (Q, bad.id, claimed[bad.id].token), backoff=0)
        worker._goodbye()

    assert not admin.exists(queue_keys(Q).job(ok.id))
    assert admin.zscore(queue_keys(Q).scheduled, bad.id) is not None  # back for a retry
    assert admin.hget(queue_keys(Q).job(bad.id), "err") == "ValueError: boom"
    assert admin.zcard(global_keys().workers) == 0
    users = admin.execute_command("ACL", "LOG")
    assert not users, users  # no command was refused on the way


def test_acl_user_without_a_needed_command_gets_a_clear_error(server):
    admin: redis.Redis = server["admin"]
    admin.execute_command("ACL", "SETUSER", "weak", "reset", "on", f">{PASSWORD}", "~dq:*", "+sadd")
    with using(f"redis://weak:{PASSWORD}@127.0.0.1:{server['srv'].port}/0"):
        with pytest.raises(RedisPermissionDenied, match="NOPERM.*evalsha"):
            jobs.record.delay_for("x", seconds=30, on_commit=False)
    admin.execute_command("ACL", "LOG", "RESET")


def test_wrong_password_is_redis_unavailable_without_the_password(server):
    url = f"redis://dq:wrong-{PASSWORD}@127.0.0.1:{server['srv'].port}/0"
    with using(url), pytest.raises(RedisUnavailable) as caught:
        jobs.record.delay_for("x", seconds=30, on_commit=False)
    assert PASSWORD not in str(caught.value) and "***" in str(caught.value)
    server["admin"].execute_command("ACL", "LOG", "RESET")
