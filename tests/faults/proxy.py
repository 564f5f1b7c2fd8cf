#!/usr/bin/env python3
"""proxy.py - a small userspace TCP proxy that adds latency, stalls connections, or resets
them, for the faults nftables cannot make (tc netem is not available on every kernel) and as
the fallback for drop/reject where network namespaces or nftables are not usable.

    proxy.py --listen HOST:PORT --target HOST:PORT --control HOST:PORT

Control connection, one command per line, answered OK:
    DELAY <ms> [SRC]   deliver every chunk <ms> later, in order (both directions)
    STALL [SRC]        stop forwarding (bytes wait in the proxy, as in a partition that drops
                       packets: TCP would deliver them once the partition heals)
    REJECT [SRC]       reset (RST) every connection and refuse new ones
    HEAL [SRC]         back to normal; stalled bytes are delivered
SRC limits a command to the connections from one client address (default: all), or, as #N,
to the N-th connection the proxy accepted (1 is the first).
"""

import argparse
import os
import selectors
import signal
import socket
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import parse_addr  # noqa: E402


class Rule:
    def __init__(self):
        self.delay = 0.0
        self.stall = False
        self.reject = False


class Pipe:
    """One proxied connection: client socket a, upstream socket b."""

    def __init__(self, a, b, src, idx):
        self.a, self.b, self.src, self.idx = a, b, src, idx
        self.pending = {a: [], b: []}  # destination -> [(due, bytes)]
        self.closed = False


class Proxy:
    def __init__(self, listen, target, control):
        self.target = target
        self.sel = selectors.DefaultSelector()
        self.rules = {}  # src or "*" -> Rule
        self.pipes = []
        self.accepted = 0
        self.ls = self.listener(listen, "listen")
        self.cs = self.listener(control, "control")

    def listener(self, addr, kind):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(addr)
        s.listen(256)
        s.setblocking(False)
        self.sel.register(s, selectors.EVENT_READ, (kind, None))
        return s

    def rule(self, src, idx=0):
        r = Rule()
        for key in ("*", src, "#%d" % idx):
            if key in self.rules:
                x = self.rules[key]
                r.delay = max(r.delay, x.delay)
                r.stall = r.stall or x.stall
                r.reject = r.reject or x.reject
        return r

    @staticmethod
    def reset(s):
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        s.close()

    def close_pipe(self, p, rst=False):
        if p.closed:
            return
        p.closed = True
        for s in (p.a, p.b):
            try:
                self.sel.unregister(s)
            except (KeyError, ValueError):
                pass
            if rst:
                self.reset(s)
            else:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()
        self.pipes.remove(p)

    def accept(self):
        try:
            a, peer = self.ls.accept()
        except OSError:
            return
        src = peer[0]
        self.accepted += 1
        if self.rule(src, self.accepted).reject:
            self.reset(a)
            return
        try:
            b = socket.create_connection(self.target, timeout=1.0)
        except OSError:
            self.reset(a)
            return
        for s in (a, b):
            s.setblocking(False)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        p = Pipe(a, b, src, self.accepted)
        self.pipes.append(p)
        self.sel.register(a, selectors.EVENT_READ, ("pipe", p))
        self.sel.register(b, selectors.EVENT_READ, ("pipe", p))

    def read(self, p, s):
        try:
            data = s.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            # forward the close once what is pending has gone out
            dst = p.b if s is p.a else p.a
            p.pending[dst].append((time.monotonic() + self.rule(p.src, p.idx).delay, None))
            try:
                self.sel.unregister(s)
            except (KeyError, ValueError):
                pass
            return
        dst = p.b if s is p.a else p.a
        p.pending[dst].append((time.monotonic() + self.rule(p.src, p.idx).delay, data))

    def flush(self):
        now = time.monotonic()
        for p in list(self.pipes):
            r = self.rule(p.src, p.idx)
            if r.stall:
                continue
            for dst in (p.a, p.b):
                q = p.pending[dst]
                while q and q[0][0] <= now:
                    _, data = q.pop(0)
                    if data is None:
                        self.close_pipe(p)
                        break
                    try:
                        dst.setblocking(True)
                        dst.sendall(data)
                        dst.setblocking(False)
                    except OSError:
                        self.close_pipe(p)
                        break
                if p.closed:
                    break

    def next_due(self):
        due = None
        for p in self.pipes:
            if self.rule(p.src, p.idx).stall:
                continue
            for q in p.pending.values():
                if q and (due is None or q[0][0] < due):
                    due = q[0][0]
        return due

    def control(self, c, line):
        w = line.split()
        if not w:
            return
        cmd, args = w[0].upper(), w[1:]
        src = "*"
        if cmd == "DELAY":
            ms = float(args[0])
            src = args[1] if len(args) > 1 else "*"
            self.rules.setdefault(src, Rule()).delay = ms / 1000.0
        elif cmd == "STALL":
            src = args[0] if args else "*"
            self.rules.setdefault(src, Rule()).stall = True
        elif cmd == "REJECT":
            src = args[0] if args else "*"
            self.rules.setdefault(src, Rule()).reject = True
            for p in list(self.pipes):
                if src in ("*", p.src, "#%d" % p.idx):
                    self.close_pipe(p, rst=True)
        elif cmd == "HEAL":
            src = args[0] if args else "*"
            if src == "*":
                self.rules.clear()
            else:
                self.rules.pop(src, None)
        elif cmd == "PING":
            pass
        else:
            c.sendall(b"ERR\n")
            return
        c.sendall(b"OK\n")

    def run(self):
        cbuf = {}
        while True:
            due = self.next_due()
            timeout = None if due is None else max(0.0, due - time.monotonic())
            for key, _ in self.sel.select(timeout):
                kind, p = key.data
                if kind == "listen":
                    self.accept()
                elif kind == "control":
                    try:
                        c, _ = self.cs.accept()
                    except OSError:
                        continue
                    c.setblocking(False)
                    cbuf[c] = b""
                    self.sel.register(c, selectors.EVENT_READ, ("ctl", None))
                elif kind == "ctl":
                    c = key.fileobj
                    try:
                        data = c.recv(4096)
                    except OSError:
                        data = b""
                    if not data:
                        self.sel.unregister(c)
                        cbuf.pop(c, None)
                        c.close()
                        continue
                    cbuf[c] += data
                    while b"\n" in cbuf[c]:
                        line, cbuf[c] = cbuf[c].split(b"\n", 1)
                        c.setblocking(True)
                        self.control(c, line.decode().strip())
                        c.setblocking(False)
                else:
                    if not p.closed:
                        self.read(p, key.fileobj)
            self.flush()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--listen", required=True)
    ap.add_argument("--target", required=True)
    ap.add_argument("--control", required=True)
    a = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    px = Proxy(parse_addr(a.listen), parse_addr(a.target), parse_addr(a.control))
    print("ready", flush=True)
    px.run()


if __name__ == "__main__":
    main()
