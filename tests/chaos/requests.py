"""requests.py - builds the request lines of the chaos clients, valid ones in every spelling
the protocol allows (verb case, tabs, duration units, option order) and malformed ones, each
with the replies it may get (its "expect" set: OK, BUSY, TIMEOUT or an error code).

A request is a dict: line (bytes, without the newline), tc (tagged | untagged | badtag |
none: which reply it gets - a bad tag is answered untagged, out of turn; a blank line gets
none), rtag (the tag its reply carries), verb, names, mode (x | s | p), owner, wait (ms,
"inf" or None), lease, permits, limit, id, all, session, secret, wellformed, expect.
"""

PREAUTH_VERBS = ("AUTH", "HELLO", "PING", "QUIT")


def dur(rng, ms):
    """A duration in one of its spellings."""
    forms = [str(ms), "%dms" % ms]
    if ms % 1000 == 0:
        forms.append("%ds" % (ms // 1000))
    if ms % 60000 == 0:
        forms.append("%dm" % (ms // 60000))
    return rng.choice(forms)


def spell_verb(rng, verb):
    r = rng.random()
    if r < 0.1:
        return verb.lower()
    if r < 0.15:
        return verb.capitalize()
    return verb


def join(rng, tokens):
    """Tokens separated by a space, sometimes by runs of spaces and tabs."""
    if rng.random() < 0.9:
        return " ".join(tokens)
    return "".join(t + rng.choice([" ", "\t", "  ", " \t "]) for t in tokens).rstrip(" \t")


class Ctx:
    """What the client knows when it sends: the server's password (None: none), whether
    this connection is authenticated (True, False, None: an AUTH is in flight) and whether
    the server hands out session secrets (None: not known yet)."""

    def __init__(self, password, authed, secrets):
        self.password, self.authed, self.secrets = password, authed, secrets

    def noauth(self, verb):
        """The set of replies when the verb needs AUTH first, or None when it does not."""
        if self.password is None or self.authed is True or verb in PREAUTH_VERBS:
            return None
        return {"NOAUTH"} if self.authed is False else set()


def make(rng, ctx, verb, tag=None, names=(), opts=None, flags=(), expect=None, **meta):
    """A well-formed request. opts: list of (key, text) in order; meta: what the checker reads."""
    tokens = []
    if tag:
        tokens.append("#" + tag)
    tokens.append(spell_verb(rng, verb))
    tokens += list(names)
    rest = ["%s=%s" % kv for kv in (opts or [])] + list(flags)
    if rng.random() < 0.3:
        rng.shuffle(rest)
    line = join(rng, tokens + rest)
    if rng.random() < 0.03:
        line += "\r"
    req = dict(line=line.encode(), tc="tagged" if tag else "untagged", rtag=tag, verb=verb, names=list(names),
               wellformed=True)
    req.update(meta)
    exp = set(expect)
    if any(k == "id" for k, _ in (opts or [])):
        exp.add("NOSESSION")  # a repeat waiting for its first request when the session ends (PROTOCOL.md)
    na = ctx.noauth(verb)
    if na is not None:
        exp = na if na else exp | {"NOAUTH"}
    req["expect"] = exp
    return req


def lock(rng, ctx, tag, names, shared=False, wait=None, lease=None, owner=None, rid=None):
    opts = []
    if wait is not None:
        opts.append(("wait", "inf" if wait == "inf" else dur(rng, wait)))
    if lease is not None:
        opts.append(("lease", dur(rng, lease)))
    if owner is not None:
        opts.append(("owner", owner))
    if rid is not None:
        opts.append(("id", rid))
    waits = wait not in (None, 0)
    exp = {"OK", "WRONGTYPE", "LIMIT", "BACKEND"} | ({"TIMEOUT", "DEADLOCK"} if waits else {"BUSY"})
    return make(rng, ctx, "LOCK", tag, names, opts, ["shared"] if shared else [], exp,
                mode="s" if shared else "x", owner=owner or "", wait=wait, lease=lease, id=rid)


def unlock(rng, ctx, tag, names, shared=False, all_=False, owner=None, rid=None):
    opts = [("owner", owner)] if owner is not None else []
    if rid is not None:
        opts.append(("id", rid))
    flags = (["shared"] if shared else []) + (["all"] if all_ else [])
    return make(rng, ctx, "UNLOCK", tag, names, opts, flags, {"OK", "NOTHELD", "BACKEND"},
                mode="s" if shared else None, owner=owner or "", all=all_, id=rid)


def acquire(rng, ctx, tag, name, limit, permits=1, wait=None, lease=None, owner=None, rid=None):
    opts = [("limit", str(limit))]
    if permits != 1 or rng.random() < 0.3:
        opts.append(("permits", str(permits)))
    if wait is not None:
        opts.append(("wait", "inf" if wait == "inf" else dur(rng, wait)))
    if lease is not None:
        opts.append(("lease", dur(rng, lease)))
    if owner is not None:
        opts.append(("owner", owner))
    if rid is not None:
        opts.append(("id", rid))
    waits = wait not in (None, 0)
    exp = {"OK", "MISMATCH", "WRONGTYPE", "LIMIT", "BACKEND"} | ({"TIMEOUT"} if waits else {"BUSY"})
    return make(rng, ctx, "ACQUIRE", tag, [name], opts, [], exp, mode="p", owner=owner or "", wait=wait,
                lease=lease, permits=permits, limit=limit, id=rid)


def release(rng, ctx, tag, name, permits=1, owner=None, rid=None):
    opts = []
    if permits != 1 or rng.random() < 0.3:
        opts.append(("permits", str(permits)))
    if owner is not None:
        opts.append(("owner", owner))
    if rid is not None:
        opts.append(("id", rid))
    return make(rng, ctx, "RELEASE", tag, [name], opts, [], {"OK", "NOTHELD", "BACKEND"}, mode="p",
                owner=owner or "", permits=permits, id=rid)


def latch(rng, ctx, tag, name, count, ttl=None):
    opts = [("count", str(count))] + ([("ttl", dur(rng, ttl))] if ttl else [])
    return make(rng, ctx, "LATCH", tag, [name], opts, [], {"OK", "WRONGTYPE", "LIMIT", "BACKEND"})


def countdown(rng, ctx, tag, name, n=None):
    opts = [("n", str(n))] if n else []
    return make(rng, ctx, "COUNTDOWN", tag, [name], opts, [], {"OK", "WRONGTYPE", "BACKEND"})


def await_(rng, ctx, tag, name, wait=None):
    opts = [("wait", "inf" if wait == "inf" else dur(rng, wait))] if wait is not None else []
    return make(rng, ctx, "AWAIT", tag, [name], opts, [], {"OK", "TIMEOUT", "WRONGTYPE", "LIMIT", "BACKEND"},
                wait=wait)


def simple(rng, ctx, tag, verb, names=()):
    """PING, QUIT, INFO, STATUS <name>."""
    exp = {"OK", "BACKEND"} if verb == "STATUS" else {"OK"}
    return make(rng, ctx, verb, tag, names, None, [], exp)


def auth(rng, ctx, tag, password):
    right = ctx.password is not None and password == ctx.password
    req = make(rng, ctx, "AUTH", tag, [password], None, [], {"OK"} if right else {"NOAUTH"}, auth_ok=right)
    req["names"] = []
    return req


def hello(rng, ctx, tag, ttl=None, name=None, session=None, secret=None, password=None, alive=None):
    """HELLO; session= resumes (alive: False when the client knows the session has ended)."""
    opts = []
    if ttl is not None:
        opts.append(("ttl", dur(rng, ttl)))
    if name is not None:
        opts.append(("name", name))
    if session is not None:
        opts.append(("session", session))
    if secret is not None:
        opts.append(("secret", secret))
    if password is not None:
        opts.append(("auth", password))
    exp = {"OK"}
    auth_ok = None
    if password is not None:
        auth_ok = ctx.password is not None and password == ctx.password
        if not auth_ok:
            exp = {"NOAUTH"}
    if session is not None and "OK" in exp:
        # a resume reads the session's record in Redis (PROTOCOL.md section 5): with Redis away,
        # a session this daemon does not have is neither found nor refused
        if alive is False or (ctx.secrets and secret is None):
            exp = {"NOSESSION", "BACKEND"}
        else:
            exp = {"OK", "NOSESSION", "BACKEND"}
        if ctx.password is not None and ctx.authed is not True and not auth_ok:
            # a resume is not one of the verbs allowed before AUTH
            exp = {"NOAUTH"} if ctx.authed is False else exp | {"NOAUTH"}
    elif ctx.password is not None and ctx.authed is not True and not auth_ok and (ttl or name):
        exp = exp | {"NOAUTH"}  # the server may refuse a HELLO with options before AUTH
    req = make(rng, ctx, "HELLO", tag, (), opts, [], exp, session=session, secret=secret, ttl=ttl,
               auth_ok=auth_ok)
    return req


def raw(line, tc, rtag, expect):
    """A malformed or odd line (bytes), answered as tc says, by one of the replies in expect."""
    return dict(line=line, tc=tc, rtag=rtag, verb=None, names=[], wellformed=False, expect=set(expect))
