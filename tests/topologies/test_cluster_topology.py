"""The Redis Cluster topology of tests/support/topologies.py: three primaries that split the slots,
a replica each, a flush that only touches servers it started, and a failover that keeps a write
the replica had acknowledged."""

from __future__ import annotations

import socket

import pytest

from tests.support.redis_server import RedisServer
from tests.support.topologies import CLUSTER_SLOTS, ClusterSet


def slot_owners(node: RedisServer) -> dict[int, int]:
    """slot -> port of the primary serving it, from ``CLUSTER NODES`` (not ``CLUSTER SLOTS``,
    which the topology itself reads)."""
    with node.client() as client:
        text = client.execute_command("CLUSTER", "NODES")
    owners = {}
    for line in text.splitlines():
        _id, address, flags, _master, _ping, _pong, _epoch, _link, *ranges = line.split()
        if "master" not in flags.split(","):
            continue
        port = int(address.split("@")[0].rsplit(":", 1)[1])
        for part in ranges:
            first, _, last = part.partition("-")
            owners.update(dict.fromkeys(range(int(first), int(last or first) + 1), port))
    return owners


def replica_ports(cluster_set: ClusterSet, master: RedisServer) -> set[int]:
    replicas = set()
    for port in cluster_set.ports:
        with cluster_set.server_on(port).client() as client:
            replication = client.info("replication")
        if replication["role"] == "slave" and int(replication["master_port"]) == master.port:
            replicas.add(port)
    return replicas


def primaries_dbsize(cluster_set: ClusterSet) -> list[int]:
    sizes = []
    for port, _node_id in cluster_set.masters():
        with cluster_set.server_on(port).client() as client:
            sizes.append(client.dbsize())
    return sizes


def test_three_primaries_split_every_slot_and_each_has_a_replica_in_sync(
    cluster_set: ClusterSet,
) -> None:
    masters = [port for port, _node_id in cluster_set.masters()]
    assert len(cluster_set.ports) == 6 and len(set(cluster_set.ports)) == 6
    assert len(masters) == 3 and cluster_set.url == f"redis://127.0.0.1:{masters[0]}/0"
    for port in cluster_set.ports:
        owners = slot_owners(cluster_set.server_on(port))
        assert len(owners) == CLUSTER_SLOTS
        assert set(owners.values()) == set(masters)
    for port in masters:
        (replica,) = replica_ports(cluster_set, cluster_set.server_on(port))
        with cluster_set.server_on(replica).client() as client:
            assert client.info("replication")["master_link_status"] == "up"


def test_keys_in_different_slots_land_on_different_primaries(cluster_set: ClusterSet) -> None:
    cluster_set.flush()
    seed = cluster_set.server_on(cluster_set.ports[0])
    owners = slot_owners(seed)
    keys: dict[int, str] = {}  # primary port -> a key whose slot it serves
    with seed.client() as client:
        for n in range(1000):
            key = f"order:{n}"
            keys.setdefault(owners[client.execute_command("CLUSTER", "KEYSLOT", key)], key)
    assert len(keys) == 3
    with cluster_set.client() as client:
        for port, key in keys.items():
            assert cluster_set.master_of(key).port == port
            client.set(key, str(port))
    for port, key in keys.items():
        with cluster_set.server_on(port).client() as direct:  # a plain client: no redirection
            assert direct.dbsize() == 1
            assert direct.get(key) == str(port)


def test_flush_empties_every_primary_and_only_the_servers_it_started(
    cluster_set: ClusterSet,
) -> None:
    cluster_set.flush()
    with cluster_set.client() as client:
        client.mset_nonatomic({f"k{n}": "v" for n in range(30)})
    sizes = primaries_dbsize(cluster_set)
    assert sum(sizes) == 30 and 0 not in sizes  # k0..k29 fall on every primary
    cluster_set.flush()
    assert primaries_dbsize(cluster_set) == [0, 0, 0]
    for port, run_id in cluster_set.run_ids().items():
        with cluster_set.server_on(port).client() as direct:
            assert direct.info("server")["run_id"] == run_id
    server = cluster_set.master_of("k1")
    started = server.run_id
    server.run_id = "a server someone else started"
    try:
        with pytest.raises(RuntimeError, match="refusing to flush"):
            cluster_set.flush()
    finally:
        server.run_id = started


def test_a_replicated_write_survives_the_loss_of_its_primary() -> None:
    with ClusterSet() as cluster_set, cluster_set.client() as client:
        key = "order:42"
        master = cluster_set.master_of(key)
        replicas = replica_ports(cluster_set, master)
        client.set("order:other", "kept")
        with master.client() as direct:  # WAIT counts the writes of its own connection
            pipe = direct.pipeline(transaction=False)
            pipe.set(key, "paid")
            pipe.wait(1, 1000)
            assert pipe.execute() == [True, 1]

        seconds = cluster_set.kill_master_of(key)

        assert seconds < 15
        assert master.process is None
        promoted = cluster_set.master_of(key)
        assert promoted.port in replicas
        assert [p for p, _id in cluster_set.masters()].count(promoted.port) == 1
        assert master.port not in [p for p, _id in cluster_set.masters()]
        assert client.get(key) == "paid"  # the client made before the failover
        assert client.get("order:other") == "kept"
        with cluster_set.client() as fresh:
            assert fresh.get(key) == "paid"
            fresh.set(key, "shipped")  # the promoted replica takes writes
        with promoted.client() as direct:
            assert direct.get(key) == "shipped"
        with pytest.raises(ConnectionRefusedError):  # a socket: redis-py would retry for 4 s
            socket.create_connection(("127.0.0.1", master.port), timeout=1).close()
