"""sentinels.py - a Redis Sentinel deployment on loopback for the fault suite: one master, two
replicas and three sentinels (quorum 2, down-after-milliseconds 1000), and the failover nemesis:
kill -9 of the master, the sentinels promote a replica, the old master comes back empty as a
replica of the new one."""

import os
import time

from common import free_port, redis_cmd, redis_ping, wait_for

NAME = "dlockm"


class Sentinels:
    def __init__(self, top, redis_server, proc):
        """proc: the Proc class of the caller (argv, log file)."""
        self.dir, self.bin, self.Proc = top, redis_server, proc
        self.ports = [free_port() for _ in range(3)]
        self.sports = [free_port() for _ in range(3)]
        self.nodes = [None] * 3
        self.sentinels = []
        self.paused = False

    def node(self, i, master_port=None):
        d = os.path.join(self.dir, "redis%d" % i)
        os.makedirs(d, exist_ok=True)
        argv = [self.bin, "--port", str(self.ports[i]), "--bind", "127.0.0.1", "--dir", d, "--save", "",
                "--appendonly", "no", "--daemonize", "no"]
        if master_port:
            argv += ["--replicaof", "127.0.0.1", str(master_port)]
        self.nodes[i] = self.Proc(argv, os.path.join(d, "redis.log")).start()
        wait_for(lambda: redis_ping(self.ports[i]), 10, "redis node %d" % i)

    def start(self):
        self.node(0)
        for i in (1, 2):
            self.node(i, self.ports[0])
        wait_for(lambda: self.replicas_of(self.ports[0]) == 2, 15, "two replicas in sync")
        for i, sp in enumerate(self.sports):
            conf = os.path.join(self.dir, "sentinel%d.conf" % i)
            with open(conf, "w") as f:
                f.write("port %d\nbind 127.0.0.1\ndir %s\n" % (sp, self.dir))
                f.write("sentinel monitor %s 127.0.0.1 %d 2\n" % (NAME, self.ports[0]))
                f.write("sentinel down-after-milliseconds %s 1000\n" % NAME)
                f.write("sentinel failover-timeout %s 5000\n" % NAME)
                f.write("sentinel parallel-syncs %s 2\n" % NAME)
            self.sentinels.append(self.Proc([self.bin, conf, "--sentinel"],
                                            os.path.join(self.dir, "sentinel%d.log" % i)).start())
        for sp in self.sports:
            wait_for(lambda: redis_ping(sp), 10, "sentinel on %d" % sp)
            wait_for(lambda: self.sentinel_sees(sp), 20, "sentinel on %d to see the replicas and the others" % sp)
        return self

    def replicas_of(self, port):
        try:
            info = redis_cmd(port, "INFO", "replication")
        except (OSError, RuntimeError):
            return -1
        return sum(1 for line in info.splitlines() if line.startswith("slave") and "state=online" in line)

    def sentinel_sees(self, sp):
        try:
            m = redis_cmd(sp, "SENTINEL", "master", NAME)
        except (OSError, RuntimeError):
            return False
        kv = dict(zip(m[::2], m[1::2]))
        return int(kv.get("num-slaves", 0)) == 2 and int(kv.get("num-other-sentinels", 0)) == 2

    def master_port(self):
        """The master's port as the sentinels see it (the first that answers), or None."""
        for sp in self.sports:
            try:
                return int(redis_cmd(sp, "SENTINEL", "get-master-addr-by-name", NAME)[1])
            except (OSError, RuntimeError, TypeError, IndexError, ValueError):
                continue
        return None

    def dlockd_args(self):
        out = []
        for sp in self.sports:
            out += ["--sentinel", "127.0.0.1:%d" % sp]
        return out + ["--sentinel-master", NAME]

    def fail_over(self, timeout=30.0):
        """kill -9 of the master; returns (ms until the sentinels name another, that port). The old
        master is started again, empty, as a replica of the new one."""
        old = self.master_port()
        i = self.ports.index(old)
        t0 = time.monotonic()
        self.nodes[i].kill()
        new = None
        while time.monotonic() < t0 + timeout:
            p = self.master_port()
            if p is not None and p != old and redis_cmd(p, "ROLE")[0] == "master":
                new = p
                break
            time.sleep(0.05)
        if new is None:
            raise RuntimeError("no failover within %.0f s of killing the master on %d" % (timeout, old))
        ms = int((time.monotonic() - t0) * 1000)
        self.node(i, new)
        return ms, new

    def alive_master(self):
        return self.master_port() is not None

    def stop(self):
        for p in self.sentinels + [n for n in self.nodes if n]:
            p.stop()

    def kill(self):
        for p in self.sentinels + [n for n in self.nodes if n]:
            try:
                p.kill()
            except OSError:
                pass
