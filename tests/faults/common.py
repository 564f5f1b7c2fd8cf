"""common.py - helpers shared by the fault-injection harness, its clients, the fenced store
and the delay proxy (Python 3 standard library only).

Every process of a run stamps its records with time.monotonic_ns(): CLOCK_MONOTONIC, one
clock for every process on the machine, so records of different processes can be ordered.
"""

import json
import os
import socket
import time


def now_ns():
    return time.monotonic_ns()


class Recorder:
    """Appends one JSON object per line to a file, with O_APPEND and one write(2) per record,
    so a record is either whole or absent even when the process is SIGKILLed."""

    def __init__(self, path, **fixed):
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.fixed = fixed

    def rec(self, **kv):
        kv.setdefault("t", now_ns())
        d = dict(self.fixed)
        d.update(kv)
        os.write(self.fd, (json.dumps(d, separators=(",", ":")) + "\n").encode())
        return kv["t"]

    def close(self):
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def read_jsonl(path):
    out = []
    try:
        with open(path, "rb") as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass  # a torn last line cannot happen with one write(2), but stay tolerant
    except FileNotFoundError:
        pass
    return out


def parse_addr(s):
    host, _, port = s.rpartition(":")
    return host, int(port)


def kv(line, key):
    """The value of key=VALUE in a reply line, or None."""
    for tok in line.split():
        if tok.startswith(key + "="):
            return tok[len(key) + 1:]
    return None


class LineConn:
    """A blocking line-oriented TCP connection with deadlines (no threads)."""

    def __init__(self, addr, src=None, timeout=1.0):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if src:
                self.sock.bind((src, 0))
            self.sock.settimeout(timeout)
            self.sock.connect(addr)
        except OSError:
            self.sock.close()
            raise
        self.sock.settimeout(None)
        self.buf = b""
        self.lines = []
        self.eof = False

    def fileno(self):
        return self.sock.fileno()

    def send(self, line):
        self.sock.sendall(line.encode() + b"\n")

    def feed(self):
        """Reads what is available (the caller knows the socket is readable). False on EOF."""
        try:
            data = self.sock.recv(65536)
        except (ConnectionResetError, BrokenPipeError, TimeoutError, OSError):
            data = b""
        if not data:
            self.eof = True
            return False
        self.buf += data
        while b"\n" in self.buf:
            line, self.buf = self.buf.split(b"\n", 1)
            self.lines.append(line.rstrip(b"\r").decode(errors="replace"))
        return True

    def readline(self, timeout):
        """Next line within timeout seconds; None on timeout; raises EOFError on EOF."""
        import select
        deadline = time.monotonic() + timeout
        while not self.lines:
            if self.eof:
                raise EOFError
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            r, _, _ = select.select([self.sock], [], [], left)
            if r and not self.feed() and not self.lines:
                raise EOFError
        return self.lines.pop(0)

    def request(self, line, timeout=5.0):
        self.send(line)
        rep = self.readline(timeout)
        if rep is None:
            raise TimeoutError("no reply to %r within %.1fs" % (line, timeout))
        return rep

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


def free_port(host="127.0.0.1"):
    s = socket.socket()
    s.bind((host, 0))
    p = s.getsockname()[1]
    s.close()
    return p


def redis_ping(port, host="127.0.0.1", timeout=0.5):
    """True when the Redis at host:port answers PING with PONG."""
    try:
        s = socket.create_connection((host, port), timeout=timeout)
    except OSError:
        return False
    try:
        s.settimeout(timeout)
        s.sendall(b"*1\r\n$4\r\nPING\r\n")
        return s.recv(64).startswith(b"+PONG")
    except OSError:
        return False
    finally:
        s.close()


def dlockd_ping(port, host="127.0.0.1"):
    """True when a dlockd answers PING on port."""
    try:
        c = LineConn((host, port), timeout=0.5)
    except OSError:
        return False
    try:
        return (c.request("PING", 1.0) or "").startswith("OK")
    except (OSError, EOFError, TimeoutError):
        return False
    finally:
        c.close()


def wait_for(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.05)
    raise RuntimeError("timed out waiting for " + what)


def percentile(values, p):
    """Nearest-rank percentile of values (p in 0..100); None when empty."""
    if not values:
        return None
    v = sorted(values)
    k = max(0, min(len(v) - 1, int(-(-p * len(v) // 100)) - 1))
    return v[k]


def redis_cmd(port, *args, host="127.0.0.1", timeout=2.0):
    """One Redis command over a new connection; the reply as str/int/list/None (errors raise)."""
    s = socket.create_connection((host, port), timeout=timeout)
    try:
        out = b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(str(a).encode()), str(a).encode())
                                                for a in args)
        s.sendall(out)
        f = s.makefile("rb")

        def parse():
            line = f.readline().rstrip(b"\r\n")
            kind, rest = line[:1], line[1:]
            if kind == b"+":
                return rest.decode()
            if kind == b"-":
                raise RuntimeError(rest.decode())
            if kind == b":":
                return int(rest)
            if kind == b"$":
                n = int(rest)
                if n < 0:
                    return None
                data = f.read(n + 2)[:n]
                return data.decode(errors="replace")
            if kind == b"*":
                n = int(rest)
                return None if n < 0 else [parse() for _ in range(n)]
            raise RuntimeError("bad reply %r" % line)
        return parse()
    finally:
        s.close()
