"""The dlockd wire format without I/O: addresses, durations, reply lines and errors."""

import json
import math
import os
from collections import namedtuple

DEFAULT_ADDR = "127.0.0.1:7411"
DEFAULT_PORT = 7411
MAX_LINE = 4096  # the server's default max-line: longest request line sent

Addr = namedtuple("Addr", "text host port path tls")
Addr.__doc__ = "One dlockd address: TCP (host, port), TLS (tls=True) or a unix socket (path)."


class Error(Exception):
    """A request failed. `code` is the protocol's ERR code (SYNTAX, NOTHELD, BACKEND, ...) or
    one of the library's own: BUSY, TIMEOUT, LOST, CONN (no connection or no reply in time),
    PROTO (a reply the library does not understand), CLOSED (the client was closed), INVAL
    (a blocking call from a callback)."""

    def __init__(self, code, text=""):
        super().__init__("%s %s" % (code, text) if text else code)
        self.code = code
        self.text = text


class Busy(Error):
    """Not free now, and the request did not wait (wait=0). `fields` has the reply's key=value
    pairs: holder= and ttl= for a lock, free= for a semaphore."""

    def __init__(self, fields):
        super().__init__("BUSY", " ".join("%s=%s" % kv for kv in fields.items()))
        self.fields = fields


class Timeout(Error):
    """Waited `wait` seconds and was not granted; nothing is held because of the request."""

    def __init__(self, text=""):
        super().__init__("TIMEOUT", text)


class Lost(Error):
    """The hold was lost before it was released: another client may have had it since."""

    def __init__(self, text=""):
        super().__init__("LOST", text)


def parse_addr(text):
    """HOST:PORT, HOST, [V6]:PORT, [V6], V6, unix:PATH or tls://HOST:PORT -> Addr."""
    tls = text.startswith("tls://")
    rest = text[6:] if tls else text
    if not tls and rest.startswith("unix:"):
        if len(rest) == 5:
            raise ValueError("empty unix socket path: %r" % text)
        return Addr(text, None, None, rest[5:], False)
    port = None
    if rest.startswith("["):
        host, sep, tail = rest[1:].partition("]")
        if not sep or (tail and not tail.startswith(":")):
            raise ValueError("bad address: %r" % text)
        port = tail[1:] if tail else None
    elif rest.count(":") == 1:
        host, _, port = rest.partition(":")
    else:
        host = rest  # a name, an IPv4 address or a bare IPv6 address
    if not host or (port is not None and not port.isdigit()) or (port and not 0 < int(port) < 65536):
        raise ValueError("bad address: %r" % text)
    return Addr(text, host, int(port) if port else DEFAULT_PORT, None, tls)


def parse_addrs(addrs=None):
    """A list of addresses or one DLOCK_ADDR-style string (separated by commas or blanks);
    None: $DLOCK_ADDR, else 127.0.0.1:7411."""
    if addrs is None:
        addrs = os.environ.get("DLOCK_ADDR") or DEFAULT_ADDR
    if isinstance(addrs, str):
        addrs = addrs.replace(",", " ").split()
    out = [parse_addr(a) for a in addrs]
    if not out:
        raise ValueError("no dlockd address")
    return out


def ms(seconds):
    """Seconds (int or float) as a protocol duration in ms; None or math.inf: 'inf'."""
    if seconds is None or seconds == math.inf:
        return "inf"
    if seconds < 0:
        raise ValueError("negative duration")
    return str(int(math.ceil(seconds * 1000)))


def check_word(what, s, empty=False):
    """s as a protocol token: 1-200 printable bytes without space or '=' (or empty)."""
    if not isinstance(s, str) or len(s) > 200 or (not s and not empty) or \
            any(not 0x21 <= ord(c) <= 0x7E for c in s) or (what == "name" and ("=" in s or s.startswith("}"))):
        raise ValueError("invalid %s: %r" % (what, s))
    return s


class Reply:
    """One line from the server: an event (`* LOST ...`) or a reply (`[#tag] STATUS ...`).
    status: OK, BUSY, TIMEOUT, ERR or the event's name; code: the ERR code; arg: the word
    after an event's name; fields: key=value pairs; json: the text after OK when it is JSON."""

    __slots__ = ("line", "event", "tag", "status", "code", "arg", "fields", "json")

    def __init__(self, line):
        self.line = line
        self.event = line.startswith("*")
        words = line.split()
        self.tag = words.pop(0)[1:] if words and words[0].startswith("#") else ""
        if self.event:
            words = words[1:]
        self.status = words.pop(0) if words else ""
        self.code = words.pop(0) if self.status == "ERR" and words else ""
        self.arg = words[0] if self.event and words and "=" not in words[0] else ""
        self.json = None
        if self.status == "OK" and words and words[0].startswith("{"):
            self.json = line.split(None, 2 if self.tag else 1)[-1]
            words = []
        self.fields = dict(w.split("=", 1) for w in words if "=" in w) if self.status != "ERR" else {}

    def error(self):
        """The exception this reply stands for, or None for OK."""
        if self.status == "OK":
            return None
        if self.status == "BUSY":
            return Busy(self.fields)
        if self.status == "TIMEOUT":
            return Timeout()
        if self.status == "ERR":
            n = 3 if self.tag else 2
            parts = self.line.split(None, n)
            return Error(self.code or "PROTO", parts[n] if len(parts) > n else "")
        return Error("PROTO", "unexpected reply %r" % self.line)

    def int(self, key):
        try:
            return int(self.fields[key])
        except (KeyError, ValueError):
            raise Error("PROTO", "no %s= in %r" % (key, self.line)) from None

    def ints(self, key, n):
        """The comma-separated numbers of key=, exactly n of them."""
        try:
            v = [int(x) for x in self.fields[key].split(",")]
        except (KeyError, ValueError):
            v = []
        if len(v) != n:
            raise Error("PROTO", "bad %s= in %r" % (key, self.line))
        return v

    def parsed_json(self):
        try:
            return json.loads(self.json)
        except (TypeError, ValueError):
            raise Error("PROTO", "no JSON in %r" % self.line) from None
