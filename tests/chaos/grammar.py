"""grammar.py - what a line from dlockd must look like (the contract, section 1 and 7 of
proto/PROTOCOL.md): parses events and replies, and checks a reply against the request it
answers. Python 3 standard library only; no I/O.
"""

import json
import re

CODES = ("SYNTAX", "UNKNOWN", "TOOBIG", "NOAUTH", "NOSESSION", "NOTHELD", "WRONGTYPE", "MISMATCH",
         "DEADLOCK", "LIMIT", "BACKEND")
LOST_REASONS = ("expired", "lease", "backend", "admin")
BYE_REASONS = ("expired", "shutdown", "moved")
TAG_RE = re.compile(r"^[A-Za-z0-9_.-]{1,32}$")
KV_RE = re.compile(r"^([a-z_]+)=(\S*)$")
HEX16 = re.compile(r"^[0-9a-f]{16}$")
HEX32 = re.compile(r"^[0-9a-f]{32}$")
UINT = re.compile(r"^[0-9]+$")


class Bad(Exception):
    """A line that does not follow the protocol."""


class Reply:
    __slots__ = ("tag", "status", "code", "fields", "obj", "body")

    def __init__(self, tag, status, code, fields, obj, body):
        self.tag, self.status, self.code, self.fields, self.obj, self.body = tag, status, code, fields, obj, body

    @property
    def kind(self):
        """OK, BUSY, TIMEOUT, or the code of an ERR."""
        return self.code if self.status == "ERR" else self.status


def printable(line):
    """Every byte of a line dlockd sends is printable ASCII or a space."""
    for ch in line:
        if not " " <= ch <= "~":
            raise Bad("byte %r in a line from the server" % ch)


def kvs(tokens):
    out = {}
    for tok in tokens:
        m = KV_RE.match(tok)
        if not m:
            raise Bad("token %r is not key=value" % tok)
        if m.group(1) in out:
            raise Bad("key %r twice" % m.group(1))
        out[m.group(1)] = m.group(2)
    return out


def parse_event(line):
    """('LOST', name, token, reason) | ('JEOPARDY',) | ('SAFE',) | ('BYE', reason)."""
    printable(line)
    p = line.split(" ")
    if len(p) < 2 or p[0] != "*" or "" in p:
        raise Bad("malformed event")
    if p[1] == "LOST":
        if len(p) < 5:
            raise Bad("LOST without name, token or reason")
        f = kvs(p[3:])
        if not UINT.match(f.get("token", "")) or f.get("reason") not in LOST_REASONS:
            raise Bad("LOST needs token=<n> reason=<%s>" % "|".join(LOST_REASONS))
        if "=" in p[2]:
            raise Bad("LOST without a name")
        return ("LOST", p[2], int(f["token"]), f["reason"])
    if p[1] in ("JEOPARDY", "SAFE"):
        kvs(p[2:])
        return (p[1],)
    if p[1] == "BYE":
        f = kvs(p[2:])
        if f.get("reason") not in BYE_REASONS:
            raise Bad("BYE needs reason=<%s>" % "|".join(BYE_REASONS))
        return ("BYE", f["reason"])
    raise Bad("unknown event %r" % p[1])


def parse_reply(line):
    printable(line)
    rest = line
    tag = None
    if rest.startswith("#"):
        head, _, rest = rest.partition(" ")
        if not TAG_RE.match(head[1:]):
            raise Bad("bad tag %r" % head)
        tag = head[1:]
    status, _, body = rest.partition(" ")
    if status == "ERR":
        code, _, text = body.partition(" ")
        if code not in CODES:
            raise Bad("unknown error code %r" % code)
        if not text.strip():
            raise Bad("ERR %s without text" % code)
        return Reply(tag, "ERR", code, {}, None, rest)
    if status not in ("OK", "BUSY", "TIMEOUT"):
        raise Bad("unknown status %r" % status)
    if status == "TIMEOUT" and body:
        raise Bad("TIMEOUT with fields")
    obj = None
    fields = {}
    if status == "OK" and body.startswith("{"):
        try:
            obj = json.loads(body)
        except ValueError as e:
            raise Bad("OK with bad JSON: %s" % e)
        if not isinstance(obj, dict):
            raise Bad("OK with JSON that is not an object")
    elif body:
        if "  " in body or body != body.strip():
            raise Bad("stray spaces")
        fields = kvs(body.split(" "))
    return Reply(tag, status, None, fields, obj, rest)


def _uint(f, key, why):
    v = f.get(key)
    if v is None or not UINT.match(v):
        raise Bad("%s: %s=<n> missing or not a number" % (why, key))
    return int(v)


def _uints(f, key, n, why):
    v = f.get(key)
    parts = v.split(",") if v else []
    if len(parts) != n or not all(UINT.match(x) for x in parts):
        raise Bad("%s: %s= must list %d numbers" % (why, key, n))
    return [int(x) for x in parts]


def _status_json(req, o):
    if o.get("name") != req["names"][0]:
        raise Bad("STATUS of %r names %r" % (req["names"][0], o.get("name")))
    t = o.get("type", "missing")
    if t not in ("lock", "semaphore", "latch", None):
        raise Bad("STATUS type %r" % t)
    if t == "latch":
        if not isinstance(o.get("count"), int) or o["count"] < 1:
            raise Bad("STATUS of a latch needs a count > 0")
        return
    if not isinstance(o.get("holders"), list) or not isinstance(o.get("waiters"), int):
        raise Bad("STATUS needs holders and waiters")
    for h in o["holders"]:
        if not isinstance(h, dict) or not isinstance(h.get("session"), str) or not isinstance(h.get("token"), int):
            raise Bad("STATUS holder without session or token")


def check_ok(req, r):
    """Raises Bad when the fields of an OK do not fit the request (a well-formed one)."""
    v, f = req["verb"], r.fields
    if v in ("LIST", "SESSIONS"):
        key = "names" if v == "LIST" else "sessions"
        if r.obj is None or not isinstance(r.obj.get(key), list) or r.obj.get("more") not in (0, 1):
            raise Bad("%s OK without {\"%s\": [...], \"more\": 0|1}" % (v, key))
        return
    if v == "FORCE":
        _uint(f, "count", "FORCE")
        return
    if v in ("STATUS", "INFO"):
        if r.obj is None:
            raise Bad("%s OK without a JSON object" % v)
        if v == "STATUS":
            _status_json(req, r.obj)
        return
    if r.obj is not None:
        raise Bad("%s OK with JSON" % v)
    if v == "HELLO":
        if not HEX16.match(f.get("session", "")):
            raise Bad("HELLO: session=<16 hex> missing")
        if "secret" in f and not HEX32.match(f["secret"]):
            raise Bad("HELLO: secret= is not 32 hex digits")
        if f.get("proto") != "1" or not f.get("server", "").startswith("dlockd/") or \
                f.get("resumed") not in ("0", "1"):
            raise Bad("HELLO: proto=1 server=dlockd/.. resumed=0|1 expected")
        _uint(f, "ttl", "HELLO")
        if "lease" in f:
            _uint(f, "lease", "HELLO")
        if f["resumed"] != ("1" if req.get("session") else "0"):
            raise Bad("HELLO: resumed=%s" % f["resumed"])
        return
    if v == "LOCK":
        n = len(req["names"])
        if n == 1:
            counts = [_uint(f, "count", "LOCK")]
            _uint(f, "token", "LOCK")
        else:
            counts = _uints(f, "counts", n, "LOCK")
            _uints(f, "tokens", n, "LOCK")
        if min(counts) < 1:
            raise Bad("LOCK granted with a count of 0")
        return
    if v == "UNLOCK":
        if len(req["names"]) == 1:
            c = _uint(f, "count", "UNLOCK")
            counts = [c]
        else:
            counts = _uints(f, "counts", len(req["names"]), "UNLOCK")
        if req.get("all") and any(counts):
            raise Bad("UNLOCK all left a count")
        return
    if v == "ACQUIRE":
        _uint(f, "token", "ACQUIRE")
        held, free = _uint(f, "held", "ACQUIRE"), _uint(f, "free", "ACQUIRE")
        if held < req["permits"] or held + free > req["limit"]:
            raise Bad("ACQUIRE: held=%d free=%d with permits=%d limit=%d" % (held, free, req["permits"],
                                                                            req["limit"]))
        return
    if v == "RELEASE":
        _uint(f, "held", "RELEASE")
        _uint(f, "free", "RELEASE")
        return
    if v in ("LATCH", "COUNTDOWN"):
        _uint(f, "count", v)


def check_busy(req, r):
    if req["verb"] == "LOCK":
        if "holder" not in r.fields:
            raise Bad("LOCK BUSY without holder=")
        _uint(r.fields, "ttl", "BUSY")
    elif req["verb"] == "ACQUIRE":
        if _uint(r.fields, "free", "BUSY") >= req["limit"] + 1:
            raise Bad("ACQUIRE BUSY free= above the limit")


def check(req, r):
    """None when the reply r fits the request req, else the reason."""
    try:
        if r.tag != req.get("rtag"):
            raise Bad("tag %r for a request tagged %r" % (r.tag, req.get("rtag")))
        if r.kind not in req["expect"]:
            raise Bad("%s where %s was expected" % (r.kind, "/".join(sorted(req["expect"]))))
        if req.get("verb") and req.get("wellformed"):
            if r.status == "OK":
                check_ok(req, r)
            elif r.status == "BUSY":
                check_busy(req, r)
    except Bad as e:
        return str(e)
    return None
