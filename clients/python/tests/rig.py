"""rig.py - real processes for the tests: one redis-server and dlockd daemons sharing it, on
free loopback ports, logs in a temporary directory (kept when $DLOCK_TEST_KEEP is set).

$DLOCKD names the daemon (default: daemon/dlockd of the source tree this file is in),
$REDIS_SERVER the redis-server (default: the one on $PATH).
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import unittest

import dlock

HERE = os.path.dirname(os.path.abspath(__file__))
ADMINPASS = "py-b0ss"
LOCK_LEASE = "6s"  # the holds of a killed daemon lapse 6 s after its last renewal


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(pred, timeout=15.0, what="condition"):
    """Polls pred until it is true; raises AssertionError after timeout seconds."""
    end = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > end:
            raise AssertionError("timed out after %.0fs waiting for %s" % (timeout, what))
        time.sleep(0.02)


class Raw:
    """A plain protocol connection, for what the library does not do (operator verbs)."""

    def __init__(self, port, timeout=10.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout)
        self.file = self.sock.makefile("rb")

    def request(self, line):
        self.sock.sendall(line.encode() + b"\n")
        while True:
            reply = self.file.readline().decode().rstrip("\r\n")
            if not reply.startswith("*"):
                return reply

    def close(self):
        self.file.close()
        self.sock.close()


class Daemon:
    def __init__(self, proc, port):
        self.proc, self.port = proc, port
        self.addr = "127.0.0.1:%d" % port

    def alive(self):
        return self.proc.poll() is None


class Rig:
    def __init__(self):
        top = os.path.join(HERE, "..", "..", "..")
        self.dlockd = os.environ.get("DLOCKD") or os.path.join(top, "daemon", "dlockd")
        self.redis = os.environ.get("REDIS_SERVER") or shutil.which("redis-server") or "redis-server"
        self.tmp = tempfile.mkdtemp(prefix="dlock-py.")
        self.procs = []
        self.rport = None

    def spawn(self, argv, log):
        with open(os.path.join(self.tmp, log), "ab") as f:
            p = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.procs.append(p)
        return p

    def start_redis(self):
        for _ in range(5):
            self.rport = free_port()
            p = self.spawn([self.redis, "--port", str(self.rport), "--bind", "127.0.0.1", "--save", "",
                            "--appendonly", "no", "--dir", self.tmp], "redis.log")
            if self._ready(p, lambda: self._redis_ping()):
                return
        raise RuntimeError("redis-server did not start; see %s" % self.tmp)

    def start_dlockd(self, *extra):
        """A dlockd on the rig's Redis, answering PING; returns a Daemon."""
        for _ in range(5):
            port = free_port()
            argv = [self.dlockd, "--listen", "127.0.0.1:%d" % port, "--redis", "127.0.0.1:%d" % self.rport,
                    "--session-ttl-min", "500ms", "--lock-lease", LOCK_LEASE, "--adminpass", ADMINPASS,
                    "--log-level", "debug"] + list(extra)
            p = self.spawn(argv, "dlockd-%d.log" % port)
            if self._ready(p, lambda: self._dlockd_ping(port)):
                return Daemon(p, port)
        raise RuntimeError("dlockd did not start; see %s" % self.tmp)

    @staticmethod
    def _ready(proc, ping):
        end = time.monotonic() + 10
        while time.monotonic() < end and proc.poll() is None:
            if ping():
                return True
            time.sleep(0.05)
        proc.kill()
        proc.wait()
        return False

    def _redis_ping(self):
        try:
            with socket.create_connection(("127.0.0.1", self.rport), 0.5) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    @staticmethod
    def _dlockd_ping(port):
        try:
            raw = Raw(port, 1.0)
        except OSError:
            return False
        try:
            return raw.request("PING") == "OK"
        except OSError:
            return False
        finally:
            raw.close()

    def kill(self, daemon, sig=signal.SIGKILL):
        daemon.proc.send_signal(sig)
        daemon.proc.wait(10)

    def admin(self, daemon, line):
        """An operator verb on daemon, with the adminpass; returns the reply."""
        raw = Raw(daemon.port)
        try:
            assert raw.request("AUTH " + ADMINPASS) == "OK"
            return raw.request(line)
        finally:
            raw.close()

    def status(self, daemon, name):
        """STATUS of name on a connection of its own, as a dict."""
        raw = Raw(daemon.port)
        try:
            reply = raw.request("STATUS " + name)
        finally:
            raw.close()
        assert reply.startswith("OK {"), reply
        return json.loads(reply[3:])

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait()
        if os.environ.get("DLOCK_TEST_KEEP"):
            print("logs kept in", self.tmp)
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)


class RigTest(unittest.TestCase):
    """Tests against one redis-server and two dlockd daemons, A and B, per test class."""

    @classmethod
    def setUpClass(cls):
        cls.rig = Rig()
        try:
            cls.rig.start_redis()
            cls.a = cls.rig.start_dlockd()
            cls.b = cls.rig.start_dlockd()
        except BaseException:
            cls.rig.stop()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.rig.stop()

    def n(self, name):
        """A name of this test's own."""
        return "%s.%s" % (self._testMethodName, name)

    def client(self, *daemons, **kw):
        """A dlock.Client on the daemons given (default A; or addrs=), closed at the end of the test."""
        kw.setdefault("ttl", 3.0)
        kw.setdefault("name", self._testMethodName[:40])
        addrs = kw.pop("addrs", None) or [d.addr for d in daemons or (self.a,)]
        c = dlock.Client(addrs, **kw)
        self.addCleanup(c.close)
        return c

    def holders(self, name, daemon=None):
        """The holders of name, as STATUS on a connection of its own tells."""
        return self.rig.status(daemon or self.a, name)["holders"]
