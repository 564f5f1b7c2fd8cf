"""The blocking client: any number of threads share one Client, one background thread per
Client owns the connection (reads, heartbeats, reconnects and resumes the session)."""

import itertools
import logging
import os
import select
import socket
import ssl
import threading

from . import _core
from ._core import Core, Request, now
from ._proto import Error

log = logging.getLogger("dlock")
BACKOFF_MIN, BACKOFF_MAX = 0.05, 2.0  # seconds between rounds of connection attempts, doubling
READ_MAX = 1 << 20                     # longest line accepted from the server

_owners = itertools.count(1)
_local = threading.local()


def thread_owner():
    """The owner string of the calling thread: threads sharing a Client exclude each other."""
    if not hasattr(_local, "owner"):
        _local.owner = "t%d.%d" % (os.getpid(), next(_owners))
    return _local.owner


def tls_context(ca=None, cert=None, key=None):
    """An ssl.SSLContext for tls:// addresses: trusts `ca` ($DLOCK_TLS_CA, else the system's
    CAs) and shows the client certificate `cert` with `key` ($DLOCK_TLS_CERT, $DLOCK_TLS_KEY)."""
    ca = ca or os.environ.get("DLOCK_TLS_CA")
    cert = cert or os.environ.get("DLOCK_TLS_CERT")
    key = key or os.environ.get("DLOCK_TLS_KEY")
    ctx = ssl.create_default_context(cafile=ca)
    if cert:
        ctx.load_cert_chain(cert, key)
    return ctx


class Hold(_core.Hold):
    __doc__ = _core.Hold.__doc__ + """

    unlock() (or release()) gives it back; a `with` block does that at its end. Both raise
    dlock.Lost for a hold that was lost (the block, only when it raised nothing itself)."""

    def unlock(self):
        self._client._release(self)

    release = unlock

    def __enter__(self):
        return self

    def __exit__(self, et, e, tb):
        try:
            self.unlock()
        except Error:
            if et is None:
                raise


class LineBuffer:
    """Splits received bytes into lines."""

    def __init__(self):
        self.buf = b""

    def feed(self, data):
        self.buf += data
        *lines, self.buf = self.buf.split(b"\n")
        if len(self.buf) > READ_MAX:
            raise Error("PROTO", "reply line too long")
        return [ln.rstrip(b"\r").decode("utf-8", "replace") for ln in lines]


def dial(addr, timeout, ctx):
    """A connected blocking socket to addr (TLS when the address says so)."""
    if addr.path:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout)
            sock.connect(addr.path)
        except BaseException:
            sock.close()
            raise
        return sock
    sock = socket.create_connection((addr.host, addr.port), timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if addr.tls:
        try:
            sock = ctx.wrap_socket(sock, server_hostname=addr.host)
        except BaseException:
            sock.close()
            raise
    return sock


class Base:
    """What both clients share: their arguments, the session's properties, the callbacks."""

    def __init__(self, addrs=None, name=None, ttl=10.0, *, password=None, on_lost=None, on_jeopardy=None,
                 tls_ca=None, tls_cert=None, tls_key=None, ssl_context=None, connect_timeout=5.0,
                 request_timeout=5.0):
        self._core = Core(addrs, name, ttl, password, request_timeout, self.Hold, self)
        need_tls = any(a.tls for a in self._core.addrs)
        self._ctx = ssl_context or (tls_context(tls_ca, tls_cert, tls_key) if need_tls else None)
        self._on_lost, self._on_jeopardy = on_lost, on_jeopardy
        self._connect_timeout = connect_timeout
        self._closed = False
        self._error = None  # why the last round of connection attempts failed

    @property
    def session(self):
        """The session id (public; the secret stays inside)."""
        return self._core.sid

    @property
    def jeopardy(self):
        """True while holds cannot be confirmed: start no new work that relies on them."""
        return bool(self._core.jeopardy)

    def _failed(self, addr, e):
        """Notes why a connection attempt to addr failed."""
        if isinstance(e, Error):
            self._error = e if e.code != "CONN" else Error("CONN", "%s: %s" % (addr.text, e.text))
        else:
            self._error = Error("CONN", "%s: %s" % (addr.text, e or type(e).__name__))

    def _callbacks(self, events):
        """Runs on_lost and on_jeopardy for events; yields what each returned."""
        for ev in events:
            cb = self._on_lost if ev[0] == "lost" else self._on_jeopardy
            if cb is not None:
                try:
                    yield cb(*ev[1:])
                except Exception:
                    log.exception("dlock: %s callback failed", ev[0])


class Client(Base):
    """One session with dlockd, shared by any number of threads.

    addrs: a list of addresses or a DLOCK_ADDR-style string ("HOST:PORT", "unix:PATH",
    "tls://HOST:PORT", comma-separated), default $DLOCK_ADDR, else 127.0.0.1:7411; all of
    them must share one Redis. name: the client name servers show; ttl: the session ttl in
    seconds. on_lost(hold) is called when a hold is lost, on_jeopardy(on, reason) when holds
    cannot be confirmed (reason: connection, heartbeat, backend) and when that is over; both
    run on the client's thread and must return quickly. password: requirepass ($DLOCK_PASSWORD).
    TLS: tls_ca, tls_cert, tls_key ($DLOCK_TLS_CA, ...) or a ready ssl_context.

    Connects at once; raises dlock.Error (code CONN) when no address answers.
    """

    Hold = Hold

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self._mu = threading.Lock()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._sock = None
        self._parted = None  # a socket we half-closed after a QUIT, closed at the next drop
        self._lines = None
        self._stop = False
        self._first = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dlock-io", daemon=True)
        self._thread.start()
        self._first.wait()
        if self._sock is None:
            self._shutdown()
            raise self._error

    # ------------------------------------------------------------ the public API

    def lock(self, names, wait=5.0, shared=False, lease=None, owner=None):
        """Takes the lock `names` (one name or a list: all or nothing), waiting up to `wait`
        seconds (0: not at all, raising dlock.Busy; None: without limit; else dlock.Timeout).
        lease: seconds after which the server releases it. owner: default the calling thread.
        Returns a Hold, to use in a `with` block or to unlock()."""
        return self._call(_core.lock_request(names, wait, shared, lease, self._owner(owner)))

    def semaphore(self, name, limit, permits=1, wait=5.0, lease=None, owner=None):
        """Takes `permits` of the semaphore `name` that allows `limit` at once; as lock()."""
        return self._call(_core.acquire_request(name, limit, permits, wait, lease, self._owner(owner)))

    def latch(self, name, count, ttl=None):
        """Creates the count-down latch `name` unless it exists; returns its count."""
        return self._call(_core.latch_request(name, count, ttl))

    def countdown(self, name, n=1):
        """Counts the latch down by n; returns what is left (0: released)."""
        return self._call(_core.countdown_request(name, n))

    def await_latch(self, name, wait=None):
        """Waits until the latch is at 0, up to `wait` seconds (None: without limit; 0: only
        looks); raises dlock.Timeout."""
        self._call(_core.await_request(name, wait))

    def status(self, name):
        """Who holds `name`, since when, how many wait: the server's STATUS as a dict."""
        return self._call(_core.status_request(name))

    def info(self):
        return self._call(Request("INFO", []))

    def ping(self):
        self._call(Request("PING", []))

    def close(self):
        """Ends the session with QUIT (every hold is released at once) and stops the thread."""
        with self._mu:
            if self._closed:
                return
            self._closed = True
            quit = self._core.live() or self._core.up  # else there is no session to end
        try:
            if quit:
                self._call(Request("QUIT", []), closing=True)
        except Error:
            pass  # the session ends by its ttl
        self._shutdown()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ------------------------------------------------------------ calls

    @staticmethod
    def _owner(owner):
        return thread_owner() if owner is None else owner

    def _call(self, r, closing=False):
        if threading.current_thread() is self._thread:
            raise Error("INVAL", "blocking calls cannot be made from a callback")
        done = threading.Event()
        r.on_done = done.set
        with self._mu:
            if self._closed and not closing:
                raise Error("CLOSED", "the client is closed")
            self._core.submit(r)
            deadline = self._core.deadline(r)
        self._wake()
        if not done.wait(None if deadline is None else max(deadline - now(), 0)):
            with self._mu:
                self._core.abandon(r)
            if not r.done:
                raise Error("CONN", "no reply in time" if self._sock else "no connection: %s" % self._error)
        if r.exc is not None:
            raise r.exc
        return r.result

    def _release(self, hold):
        with self._mu:
            r = self._core.release_request(hold)
        self._wake()
        if r is not None:
            self._call(r)

    def _wake(self):
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass  # a full socket wakes it as well

    def _shutdown(self):
        with self._mu:
            self._stop = True
        self._wake()
        if threading.current_thread() is not self._thread:
            self._thread.join()
        self._wake_r.close()
        self._wake_w.close()

    # ------------------------------------------------------------ the I/O thread

    def _run(self):
        try:
            self._loop()
        except Exception:  # a bug: calls fail by their deadlines rather than hang
            log.exception("dlock: the I/O thread failed")
            self._error = Error("PROTO", "the I/O thread failed")
        finally:
            with self._mu:
                self._core.fail_all(Error("CLOSED", "the client is closed"))
            self._first.set()
            if self._sock is not None and self._send():  # a QUIT queued at the last moment
                self._sock.close()
                self._sock = None
            if self._parted is not None:
                self._parted.close()

    def _loop(self):
        backoff = BACKOFF_MIN
        while not self._stop:
            if self._sock is not None:
                self._serve()
            elif self._core.ended:
                self._nap(60)
            elif self._connect():
                backoff = BACKOFF_MIN
            elif not self._first.is_set():
                break
            else:
                with self._mu:
                    wait = self._core.tick(now())
                self._deliver()
                self._nap(min(wait, backoff))
                backoff = min(backoff * 2, BACKOFF_MAX)
            self._first.set()
            self._deliver()

    def _connect(self):
        """One round of connection attempts, from the session's own server on. True when up."""
        with self._mu:
            if self._core.live() and now() >= self._core.session_end():
                return False  # tick() reports the loss first
            start, n = self._core.cur, len(self._core.addrs)
        for i in range(n):
            idx = (start + i) % n
            try:
                self._attempt(idx)
                return True
            except (Error, OSError, EOFError, ValueError) as e:  # ssl.SSLError is an OSError
                self._failed(self._core.addrs[idx], e)
        return False

    def _attempt(self, idx):
        """Connects to address idx and says HELLO (resuming the session when it may live)."""
        with self._mu:
            deadline = self._core.attempt_deadline(self._connect_timeout)
        sock = dial(self._core.addrs[idx], max(deadline - now(), 0.001), self._ctx)
        lines = LineBuffer()
        try:
            with self._mu:
                line = self._core.hello_line()
            pending = []
            while line is not None:
                sock.settimeout(max(deadline - now(), 0.001))
                sock.sendall(line.encode() + b"\n")
                reply = None
                while reply is None:
                    if not pending:
                        sock.settimeout(max(deadline - now(), 0.001))
                        data = sock.recv(65536)
                        if not data:
                            raise EOFError("connection closed")
                        pending = lines.feed(data)
                    ln = pending.pop(0)
                    if ln.startswith("*"):
                        with self._mu:
                            self._core.on_line(ln)
                    elif ln.startswith("#hello "):
                        reply = ln
                with self._mu:
                    line = self._core.on_hello(reply, idx)
            sock.setblocking(False)
        except BaseException:
            sock.close()
            raise
        self._sock, self._lines = sock, lines
        if pending:  # events that came with the reply (LOSTs kept for this resume)
            with self._mu:
                for ln in pending:
                    self._core.on_line(ln)

    def _serve(self):
        """One round while connected: timers, write, wait, read."""
        with self._mu:
            wait = self._core.tick(now())
        if not self._send():
            return
        if self._core.drop_now:
            return self._drop()
        if not getattr(self._sock, "pending", lambda: 0)():
            ready, _, _ = select.select([self._sock, self._wake_r], [], [], wait)
            if self._wake_r in ready:
                try:
                    while self._wake_r.recv(4096):
                        pass
                except OSError:
                    pass
            if self._sock not in ready:
                return
        try:
            while True:
                data = self._sock.recv(65536)
                if not data:
                    return self._drop()
                lines = self._lines.feed(data)
                with self._mu:
                    for ln in lines:
                        self._core.on_line(ln)
        except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            pass
        except (OSError, Error):
            self._drop()

    def _send(self):
        """Sends what Core queued. False when the connection broke."""
        with self._mu:
            data = self._core.take_out()
        if not data:
            return True
        try:
            self._sock.settimeout(self._core.request_timeout)
            self._sock.sendall(data)
            self._sock.setblocking(False)
            return True
        except OSError:
            self._drop()
            return False

    def _drop(self):
        if self._parted is not None:
            self._parted.close()
            self._parted = None
        if self._core.drop_now:
            # Our QUIT ends a session we no longer trust. A close now could make the server
            # drop the QUIT unread (its replies to what came before would meet a reset):
            # only our sending side closes, as a half-close asks the server to carry out
            # what it received; the socket goes with the next drop.
            try:
                self._sock.shutdown(socket.SHUT_WR)
                self._parted = self._sock
            except OSError:
                self._sock.close()
        else:
            self._sock.close()
        self._sock = None
        with self._mu:
            self._core.on_drop()

    def _nap(self, seconds):
        select.select([self._wake_r], [], [], seconds)
        try:
            while self._wake_r.recv(4096):
                pass
        except OSError:
            pass

    def _deliver(self):
        """Runs the callbacks for what happened, outside the lock."""
        with self._mu:
            events, self._core.events = self._core.events, []
        for _ in self._callbacks(events):
            pass
