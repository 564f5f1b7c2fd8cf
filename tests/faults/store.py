#!/usr/bin/env python3
"""store.py - the fenced store: a tiny TCP server that holds one value per key and checks
fencing tokens, the way a storage service protected by dlockd must.

    store.py --listen HOST:PORT --log FILE --mode fenced|writes|off

A value is the chain of writes that built it: version 0 is empty and every accepted write
makes a new version whose parent is the version the writer read ("read-modify-write").
A write is acknowledged (OK) only once it is the current version, so a write that is lost
later was overwritten by a write computed from an older read.

Protocol (one line each way):
    READ <key> <token>                 -> OK ver=<current version> highest=<h>  | STALE highest=<h>
    WRITE <key> <token> <base> <wid>   -> OK ver=<new version>                  | STALE highest=<h>
    DUMP                               -> one JSON line: every key's versions, current, highest
    STATS                              -> OK reads=.. writes=.. stale_reads=.. stale_writes=..

Modes (the storage rule for fencing tokens):
    fenced  READ and WRITE carrying a token lower than the highest token the key has seen are
            refused (STALE); an accepted READ or WRITE raises the highest. Reads must take part:
            a writer that read under an old token could otherwise overwrite a newer holder that
            has read but not written yet.
    writes  only WRITEs are checked and raise the highest (the weaker rule, for comparison).
    off     nothing is checked (the control run: it must show lost updates).
Every request is logged (one JSON line with a monotonic timestamp) to --log.
"""

import argparse
import json
import os
import selectors
import signal
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Recorder, parse_addr  # noqa: E402


class Key:
    def __init__(self):
        self.versions = [[-1, None, 0]]  # [parent version, write id, token]
        self.cur = 0
        self.highest = 0


class Store:
    def __init__(self, mode, log):
        self.mode = mode
        self.log = log
        self.keys = {}
        self.stats = dict(reads=0, writes=0, stale_reads=0, stale_writes=0)

    def key(self, k):
        if k not in self.keys:
            self.keys[k] = Key()
        return self.keys[k]

    def handle(self, line):
        p = line.split()
        if not p:
            return None
        verb = p[0].upper()
        if verb == "READ" and len(p) == 3:
            k, tok = self.key(p[1]), int(p[2])
            self.stats["reads"] += 1
            hb = k.highest
            if self.mode == "fenced" and tok < k.highest:
                self.stats["stale_reads"] += 1
                self.log.rec(op="read", key=p[1], tok=tok, ok=False, hb=hb, cur=k.cur)
                return "STALE highest=%d" % k.highest
            if self.mode == "fenced":
                k.highest = max(k.highest, tok)
            self.log.rec(op="read", key=p[1], tok=tok, ok=True, hb=hb, cur=k.cur)
            return "OK ver=%d highest=%d" % (k.cur, k.highest)
        if verb == "WRITE" and len(p) == 5:
            k, tok, base, wid = self.key(p[1]), int(p[2]), int(p[3]), p[4]
            self.stats["writes"] += 1
            hb = k.highest
            if self.mode != "off" and tok < k.highest:
                self.stats["stale_writes"] += 1
                self.log.rec(op="write", key=p[1], tok=tok, base=base, wid=wid, ok=False, hb=hb, cur=k.cur)
                return "STALE highest=%d" % k.highest
            if not 0 <= base < len(k.versions):
                return "ERR bad base"
            k.versions.append([base, wid, tok])
            prev = k.cur
            k.cur = len(k.versions) - 1
            k.highest = max(k.highest, tok)
            self.log.rec(op="write", key=p[1], tok=tok, base=base, wid=wid, ok=True, hb=hb, cur=prev, ver=k.cur)
            return "OK ver=%d" % k.cur
        if verb == "DUMP":
            return json.dumps({n: {"cur": k.cur, "highest": k.highest, "versions": k.versions}
                               for n, k in self.keys.items()}, separators=(",", ":"))
        if verb == "STATS":
            return "OK " + " ".join("%s=%d" % kv for kv in sorted(self.stats.items()))
        if verb == "PING":
            return "OK"
        return "ERR unknown request"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--listen", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--mode", choices=("fenced", "writes", "off"), default="fenced")
    a = ap.parse_args()

    store = Store(a.mode, Recorder(a.log, src="store"))
    lsock = socket.socket()
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsock.bind(parse_addr(a.listen))
    lsock.listen(128)
    lsock.setblocking(False)
    sel = selectors.DefaultSelector()
    sel.register(lsock, selectors.EVENT_READ, None)
    bufs = {}
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print("ready", flush=True)
    while True:
        for key, _ in sel.select():
            if key.data is None:
                try:
                    c, _ = lsock.accept()
                except OSError:
                    continue
                c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                c.setblocking(True)
                bufs[c] = b""
                sel.register(c, selectors.EVENT_READ, "c")
                continue
            c = key.fileobj
            try:
                data = c.recv(65536)
            except OSError:
                data = b""
            if not data:
                sel.unregister(c)
                del bufs[c]
                c.close()
                continue
            bufs[c] += data
            out = []
            while b"\n" in bufs[c]:
                line, bufs[c] = bufs[c].split(b"\n", 1)
                rep = store.handle(line.decode(errors="replace").strip())
                if rep is not None:
                    out.append(rep + "\n")
            if out:
                try:
                    c.sendall("".join(out).encode())
                except OSError:
                    pass


if __name__ == "__main__":
    main()
