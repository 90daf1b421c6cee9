"""A private Redis Cluster on loopback: it spreads keys over its masters, a replica takes over
from a master killed outright, and stop() leaves nothing running."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from redis.cluster import ClusterNode
from redis.cluster import RedisCluster as ClusterClient

from crawler.local.redis_cluster import RedisCluster, parse_nodes

KEYS = [f"{{tag{i}}}:k" for i in range(12)]  # hash tags pick the slot


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[RedisCluster]:
    with RedisCluster(masters=3, replicas=1, root=tmp_path / "cluster") as c:
        yield c


def _client(cluster: RedisCluster) -> ClusterClient:
    nodes = [ClusterNode("127.0.0.1", p) for p in cluster.master_ports()]  # type: ignore[no-untyped-call]
    return ClusterClient(startup_nodes=nodes, socket_timeout=2)


def test_parse_nodes_reads_flags_masters_and_slot_ranges() -> None:
    text = ("a1 127.0.0.1:7001@17001 myself,master - 0 0 1 connected 0-5460 [5461->-b2]\n"
            "b2 127.0.0.1:7002@17002,host master,fail - 0 0 2 disconnected\n"
            "c3 127.0.0.1:7003@17003 slave a1 0 0 1 connected\n"
            "d4 127.0.0.1:7004@17004 master - 0 0 3 connected 5461 5462-16383\n")
    a, b, c, d = parse_nodes(text)
    assert (a.port, a.up_master, a.slots) == (7001, True, (range(0, 5461),))
    assert (b.port, b.up_master, b.slots) == (7002, False, ())
    assert (c.master_id, c.up_master) == ("a1", False)
    assert d.slots == (range(5461, 5462), range(5462, 16384))


def test_a_cluster_spreads_keys_and_survives_the_loss_of_a_master(cluster: RedisCluster) -> None:
    assert len(cluster.ports) == 6 and len(cluster.master_ports()) == 3
    assert cluster.url == "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in cluster.master_ports())
    replicas = {p: cluster.replica_of(p) for p in cluster.ports}
    assert sorted(m for m in replicas.values() if m is not None) == cluster.master_ports()

    client = _client(cluster)
    for key in KEYS:
        client.set(key, key.upper())
    owners = {key: cluster.master_for_key(key) for key in KEYS}
    assert len(set(owners.values())) >= 2
    nodes = cluster.node_clients()
    assert sum(int(c.dbsize()) for c in nodes.values()) == len(KEYS)
    assert all(nodes[owners[k]].get(k) == k.upper().encode() for k in KEYS)

    key = KEYS[0]
    dead = owners[key]
    heir = next(p for p, m in replicas.items() if m == dead)
    assert nodes[dead].wait(1, 1000) == 1  # its replica has every key before the kill
    for c in nodes.values():
        c.close()
    cluster.kill(dead)
    cluster.wait_failover(dead)
    assert dead not in cluster.master_ports() and heir in cluster.master_ports()
    assert cluster.master_for_key(key) == heir
    deadline = time.monotonic() + 10
    while True:  # the client's slot map still names the dead master until it asks again
        try:
            assert client.get(key) == key.upper().encode()
            break
        except redis.ConnectionError:
            assert time.monotonic() < deadline
            time.sleep(0.2)
    client.set(key, "after")
    assert client.get(key) == b"after"
    client.close()


def test_stop_leaves_no_node_running(tmp_path: Path) -> None:
    cluster = RedisCluster(masters=3, replicas=0).start()
    own = cluster.dir
    pids = [p.pid for p in cluster.procs.values()]
    assert own.is_dir() and len(pids) == 3
    cluster.kill(cluster.ports[0])  # one already dead is no obstacle
    cluster.stop()
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    for port in cluster.ports:
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
    assert not own.exists()
