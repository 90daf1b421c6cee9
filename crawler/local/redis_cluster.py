"""A private Redis Cluster on loopback, for tests and benchmarks: masters and their replicas, a
directory each, run by the redis-server ``find_redis_server`` picks and joined by the redis-cli
beside it (or on PATH).

Nodes run with ``cluster-require-full-coverage no``, so while a dead master's replica waits out
the node timeout to be promoted the other masters keep serving their slots, as a crawl wants of
them; and with ``cluster-replica-validity-factor 0``, so a replica may always take over, however
long since it last heard from its master. Like ``RedisServer``'s, each node has a session of its
own and dies with the thread that started it.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import redis

from crawler.local.lifeline import preexec_die_with
from crawler.local.redis_server import RedisServerError, find_redis_server, free_port

SLOTS = 16384
BUS_OFFSET = 10000  # Redis 6.2 has no cluster-port option: a node's bus is its port + 10000


@dataclass(frozen=True)
class Node:
    """One line of CLUSTER NODES, as the node asked sees it."""

    id: str
    port: int
    flags: frozenset[str]
    master_id: str  # "-" for a master
    slots: tuple[range, ...]

    @property
    def up_master(self) -> bool:
        return "master" in self.flags and not self.flags & {"fail", "fail?", "noaddr"}


def parse_nodes(text: str) -> list[Node]:
    nodes = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 8:
            continue
        slots = [s.partition("-") for s in fields[8:] if not s.startswith("[")]  # "[...]": a slot in migration
        port = int(fields[1].split("@")[0].rsplit(":", 1)[1])
        nodes.append(Node(fields[0], port, frozenset(fields[2].split(",")), fields[3],
                          tuple(range(int(lo), int(hi or lo) + 1) for lo, _, hi in slots)))
    return nodes


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except (OSError, OverflowError):
            return False
    return True


def find_cli(server: str) -> str:
    """The redis-cli beside ``server``, else the one on PATH: one of the same release is likeliest to work."""
    beside = Path(server).with_name("redis-cli")
    if os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("redis-cli")
    if not found:
        raise RedisServerError(f"no redis-cli beside {server} nor on PATH: cannot create a cluster")
    return found


@contextmanager
def _conn(port: int) -> Iterator[redis.Redis]:
    client = redis.Redis(port=port, socket_connect_timeout=0.5, socket_timeout=2, decode_responses=True)
    try:
        yield client
    finally:
        client.close()


@dataclass
class RedisCluster:
    """``masters`` masters with ``replicas`` replicas each, on free loopback ports. Ask the cluster
    itself (``master_ports``, ``replica_of``...) who serves what: a failover changes it."""

    masters: int = 3
    replicas: int = 1
    node_timeout_ms: int = 1000
    root: str | Path | None = None  # None: a temporary directory of its own, removed by stop()
    ports: list[int] = field(default_factory=list, init=False)
    procs: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict, init=False)
    _killed: set[int] = field(default_factory=set, init=False)
    _seeds: list[int] = field(default_factory=list, init=False)
    _tmp: str | None = field(default=None, init=False)
    _server: str = field(default="", init=False)  # the redis-server binary its nodes run

    @property
    def url(self) -> str:
        """The masters it started with: seeds, from which a client learns the rest."""
        return "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in self._seeds)

    def start(self, timeout: float = 30.0) -> RedisCluster:
        deadline = time.monotonic() + timeout
        server = self._server = find_redis_server().path
        self.ports, self.procs, self._killed = [], {}, set()
        if self.root is None:
            self._tmp = tempfile.mkdtemp(prefix="crawler-redis-cluster-")
        try:
            for _ in range(self.masters * (1 + self.replicas)):
                self._start_node(server)
            self._wait(lambda: all(self._ask(p, "PING") for p in self.ports), deadline, "every node to answer")
            self._cli(deadline, "--cluster", "create", *(f"127.0.0.1:{p}" for p in self.ports),
                      "--cluster-replicas", str(self.replicas), "--cluster-yes")
            self._wait(self._settled, deadline, "the cluster to settle")
            self._seeds = self.master_ports()
        except BaseException:
            self.stop()
            raise
        return self

    @property
    def dir(self) -> Path:
        """Where the nodes keep their files, a directory each named by its port."""
        return Path(self.root or self._tmp or ".")

    def _start_node(self, server: str) -> None:
        port = free_port()
        while port in self.ports or not _bindable(port + BUS_OFFSET):
            port = free_port()
        d = self.dir / str(port)
        d.mkdir(parents=True, exist_ok=True)
        args = [server, "--port", str(port), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
                "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", str(self.node_timeout_ms),
                "--cluster-replica-validity-factor", "0", "--cluster-require-full-coverage", "no",
                # A replica's first sync would otherwise wait 5 s for other replicas to share it.
                "--repl-diskless-sync-delay", "0",
                "--save", "", "--appendonly", "no", "--dir", str(d), "--logfile", str(d / "redis.log")]
        with open(d / "stderr", "wb") as err:  # the child has its own copy of the descriptor
            self.procs[port] = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=err, cwd=d,
                                                start_new_session=True, preexec_fn=preexec_die_with(os.getpid()))
        self.ports.append(port)

    def _ask(self, port: int, *command: str) -> object:
        with _conn(port) as client:
            return client.execute_command(*command)  # type: ignore[no-untyped-call]  # untyped in redis-py

    def _wait(self, check: Callable[[], bool], deadline: float, what: str) -> None:
        while time.monotonic() < deadline:
            for port, proc in self.procs.items():
                if proc.poll() is not None and port not in self._killed:
                    d = self.dir / str(port)
                    said = "".join(f.read_text(errors="replace") for f in (d / "stderr", d / "redis.log") if f.exists())
                    raise RedisServerError(f"cluster node {port} exited with {proc.returncode}: {said.strip()[-300:]}")
            try:
                if check():
                    return
            except redis.RedisError:
                pass  # a node not yet listening, or mid-failover
            time.sleep(0.05)
        raise RedisServerError(f"timed out waiting for {what}")

    def _settled(self) -> bool:
        replicas = 0
        for port in self.ports:
            with _conn(port) as client:
                info, repl = client.cluster("INFO"), client.info("replication")
            if (info["cluster_state"], int(info["cluster_slots_assigned"]), int(info["cluster_known_nodes"])) \
                    != ("ok", SLOTS, len(self.ports)):
                return False
            if repl["role"] == "slave":
                replicas += 1
                if repl["master_link_status"] != "up":
                    return False
            # A replica's link can be up before gossip has told every node whom it replicates;
            # ``replica_of`` asks one node, so each must already know.
            if sum(n.master_id != "-" for n in self.nodes(port)) != self.masters * self.replicas:
                return False
        return replicas == self.masters * self.replicas

    def add_master(self, timeout: float = 30.0) -> int:
        """Start a node and join it to the cluster as a master serving no slots yet (``rebalance``
        gives it some). Returns its port."""
        deadline = time.monotonic() + timeout
        self._start_node(self._server)
        port = self.ports[-1]
        self._wait(lambda: bool(self._ask(port, "PING")), deadline, f"node {port} to answer")
        self._cli(deadline, "--cluster", "add-node", f"127.0.0.1:{port}", f"127.0.0.1:{self.master_ports()[0]}")
        def known() -> bool:
            for p in self.live_ports():
                with _conn(p) as client:  # the new node too: a migration to it is refused till then
                    if client.cluster("INFO")["cluster_state"] != "ok":
                        return False
                if len(self.nodes(p)) != len(self.live_ports()):
                    return False
            return True

        self._wait(known, deadline, f"every node to know {port}")
        return port

    def rebalance(self, timeout: float = 120.0) -> None:
        """Move slots, with their keys, live (``MIGRATE``), until every master serves about as
        many, a master with none among them: what an operator runs after ``add_master``."""
        deadline = time.monotonic() + timeout
        self._cli(deadline, "--cluster", "rebalance", f"127.0.0.1:{self.master_ports()[0]}",
                  "--cluster-use-empty-masters", "--cluster-yes")

    def move_slot(self, slot: int, to_port: int) -> None:
        """Move one slot, keys and all, to the master on ``to_port``, as ``rebalance`` moves
        each (IMPORTING, MIGRATING, MIGRATE in batches, then the new owner told to every master)."""
        view = self.nodes()
        ids = {n.port: n.id for n in view}
        source = next(n.port for n in view if n.up_master and any(slot in r for r in n.slots))
        if source == to_port:
            return
        self._ask(to_port, "CLUSTER", "SETSLOT", str(slot), "IMPORTING", ids[source])
        self._ask(source, "CLUSTER", "SETSLOT", str(slot), "MIGRATING", ids[to_port])
        while batch := cast(list[str], self._ask(source, "CLUSTER", "GETKEYSINSLOT", str(slot), "100")):
            self._ask(source, "MIGRATE", "127.0.0.1", str(to_port), "", "0", "5000", "KEYS", *batch)
        # The new owner first, then the old, as redis-cli does: the other way round, clients
        # bounce between the two for a moment, and the slot has no owner should the new one die.
        for port in dict.fromkeys([to_port, source, *self.master_ports()]):
            self._ask(port, "CLUSTER", "SETSLOT", str(slot), "NODE", ids[to_port])

    def slot_of(self, key: str) -> int:
        return int(str(self._ask(self.live_ports()[0], "CLUSTER", "KEYSLOT", key)))

    def _cli(self, deadline: float, *args: str) -> str:
        out = subprocess.run([find_cli(self._server), *args], capture_output=True, text=True,
                             timeout=max(1.0, deadline - time.monotonic()))
        if out.returncode:
            raise RedisServerError(f"redis-cli {args[1]} failed: {(out.stdout + out.stderr)[-500:]}")
        return out.stdout

    def live_ports(self) -> list[int]:
        return [p for p in self.ports if self.procs[p].poll() is None]

    def nodes(self, port: int | None = None) -> list[Node]:
        """The cluster as ``port`` (default: the first live node) sees it."""
        asked = port if port is not None else self.live_ports()[0]
        return parse_nodes(str(self._ask(asked, "CLUSTER", "NODES")))

    def master_ports(self) -> list[int]:
        return sorted(n.port for n in self.nodes() if n.up_master)

    def replica_of(self, port: int) -> int | None:
        """The port of the master ``port`` replicates, None if it is a master."""
        view = {n.port: n for n in self.nodes()}
        by_id = {n.id: n.port for n in view.values()}
        return by_id.get(view[port].master_id)

    def master_for_key(self, key: str) -> int:
        slot = self.slot_of(key)
        for n in self.nodes():
            if n.up_master and any(slot in r for r in n.slots):
                return n.port
        raise LookupError(f"no live master serves slot {slot} (key {key!r})")

    def kill(self, port: int) -> None:
        """SIGKILL: no shutdown, no last word to its replicas."""
        self._killed.add(port)
        self.procs[port].send_signal(signal.SIGKILL)
        self.procs[port].wait()

    def wait_failover(self, dead_port: int, timeout: float = 20.0) -> None:
        """Until every live node says the cluster is ok and sees all slots served by live masters."""
        def recovered() -> bool:
            for port in self.live_ports():
                with _conn(port) as client:
                    if client.cluster("INFO")["cluster_state"] != "ok":
                        return False
                served = sum(len(r) for n in self.nodes(port) if n.up_master and n.port != dead_port for r in n.slots)
                if served != SLOTS:
                    return False
            return True

        self._wait(recovered, time.monotonic() + timeout, f"a failover from {dead_port}")

    def node_clients(self) -> dict[int, redis.Redis]:
        """A plain client for each live master (the caller closes them), for INFO, DBSIZE and the like."""
        return {p: redis.Redis(port=p, socket_timeout=5) for p in self.master_ports()}

    def stop(self) -> None:
        running = [p for p in self.procs.values() if p.poll() is None]
        for p in running:  # all at once: each takes a moment to shut down
            p.terminate()
        for p in running:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def __enter__(self) -> RedisCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
