"""rig.py - the setup the reproducers share: one redis-server, dlockd A talking to it directly
and dlockd B through proxy.py (so that B's links to Redis can be stalled), lock-lease 3 s,
logs in a temporary directory.

    def body(rig):
        x, y = rig.client("A", "X"), rig.client("B", "Y")
        ...
        return 0 (dlockd behaved) or 1 (the bug showed)

    sys.exit(Rig(session_ttl="10s").run(body))

run() returns 2 when the setup failed, and keeps the logs unless the status is 0 (or
FAULTS_KEEP is set in the environment).
"""

import os
import shutil
import subprocess
import sys
import tempfile
import time

from common import LineConn, dlockd_ping, free_port, redis_ping, wait_for

HERE = os.path.dirname(os.path.abspath(__file__))
SETUP_ERRORS = (OSError, EOFError, TimeoutError, RuntimeError, AssertionError, ValueError)


class Rig:
    def __init__(self, session_ttl):
        self.session_ttl = session_ttl
        self.dlockd = os.environ.get("DLOCKD", os.path.join(HERE, "..", "..", "daemon", "dlockd"))
        self.redis = os.environ.get("REDIS_SERVER") or shutil.which("redis-server")
        self.tmp = tempfile.mkdtemp(prefix="dlockd-repro.")
        self.procs = []
        self.rport = self.pport = self.cport = None
        self.ports = {}  # "A", "B" -> dlockd port

    def spawn(self, argv, name):
        f = open(os.path.join(self.tmp, name), "ab")
        p = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        f.close()
        self.procs.append(p)
        return p

    def log(self, name):
        return os.path.join(self.tmp, name)

    def start(self):
        self.rport, self.pport, self.cport, aport, bport = (free_port() for _ in range(5))
        self.spawn([self.redis, "--port", str(self.rport), "--bind", "127.0.0.1", "--save", "",
                    "--appendonly", "no", "--dir", self.tmp], "redis.log")
        wait_for(lambda: redis_ping(self.rport), 10, "redis")
        self.spawn([sys.executable, os.path.join(HERE, "proxy.py"), "--listen", "127.0.0.1:%d" % self.pport,
                    "--target", "127.0.0.1:%d" % self.rport, "--control", "127.0.0.1:%d" % self.cport],
                   "proxy.out")
        wait_for(lambda: dlockd_ping(self.cport), 10, "proxy")
        common = ["--session-ttl", self.session_ttl, "--lock-lease", "3s", "--backend-timeout", "1s",
                  "--log-level", "debug"]
        for name, port, redis_port in (("A", aport, self.rport), ("B", bport, self.pport)):
            self.spawn([self.dlockd, "--listen", "127.0.0.1:%d" % port, "--redis", "127.0.0.1:%d" % redis_port] +
                       common, name + ".log")
            wait_for(lambda: dlockd_ping(port), 10, "dlockd " + name)
            self.ports[name] = port

    def client(self, daemon, name):
        c = LineConn(("127.0.0.1", self.ports[daemon]), timeout=1.0)
        assert c.request("HELLO ttl=%s name=%s" % (self.session_ttl, name)).startswith("OK")
        return c

    def ctl(self, cmd):
        """A command to the proxy between B and Redis: STALL, HEAL, STALL #N (N-th connection)."""
        c = LineConn(("127.0.0.1", self.cport), timeout=1.0)
        assert c.request(cmd) == "OK"
        c.close()

    def run(self, body):
        status = 2
        try:
            self.start()
            status = body(self)
        except SETUP_ERRORS as e:
            print("setup failed: %s: %s" % (type(e).__name__, e))
            status = 2
        finally:
            for p in self.procs:
                p.kill()
                p.wait()
            if status == 0 and not os.environ.get("FAULTS_KEEP"):
                shutil.rmtree(self.tmp, ignore_errors=True)
            else:
                print("logs in", self.tmp)
        return status


def read_lines(c, secs, ping_every=None):
    """The lines c reads within secs, but the replies to "#p" pings; with ping_every (seconds) it
    sends "#p PING" that often, to keep its session alive."""
    out, end, next_ping = [], time.monotonic() + secs, 0.0
    while True:
        now = time.monotonic()
        if now >= end:
            return out
        if ping_every is not None and now >= next_ping:
            c.send("#p PING")
            next_ping = now + ping_every
        line = c.readline(min(0.05, end - now))
        if line is not None and not line.startswith("#p"):
            out.append(line)
