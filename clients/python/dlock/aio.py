"""The asyncio client: the API of dlock.Client with async/await. One task per Client owns the
connection; every asyncio task is its own lock owner, as every thread is with dlock.Client.

    async with dlock.aio.Client() as c:
        async with c.lock("invoices", wait=5) as h:
            await write_invoices(h.token)
"""

import asyncio
import itertools
import os
import weakref

from . import _core, client
from ._core import Request, now
from ._proto import Error
from .client import BACKOFF_MAX, BACKOFF_MIN, READ_MAX

_owners = itertools.count(1)
_task_owners = weakref.WeakKeyDictionary()


def task_owner():
    """The owner string of the current task."""
    task = asyncio.current_task()
    if task not in _task_owners:
        _task_owners[task] = "a%d.%d" % (os.getpid(), next(_owners))
    return _task_owners[task]


class Hold(_core.Hold):
    __doc__ = _core.Hold.__doc__ + """

    await unlock() (or release()) gives it back; an `async with` block does that at its end.
    Both raise dlock.Lost for a hold that was lost (the block, only when it raised nothing)."""

    async def unlock(self):
        await self._client._release(self)

    release = unlock

    async def __aenter__(self):
        return self

    async def __aexit__(self, et, e, tb):
        try:
            await self.unlock()
        except Error:
            if et is None:
                raise


class Pending:
    """What lock() and semaphore() return: await it for the Hold, or use it in `async with`."""

    def __init__(self, client, request):
        self._client, self._request, self._hold = client, request, None

    def __await__(self):
        return self._client._call(self._request).__await__()

    async def __aenter__(self):
        self._hold = await self
        return self._hold

    async def __aexit__(self, et, e, tb):
        await self._hold.__aexit__(et, e, tb)


class Client(client.Base):
    """One session with dlockd for the tasks of one event loop; the arguments are those of
    dlock.Client. It connects on `await connect()`, `async with`, or the first request;
    on_lost and on_jeopardy may be coroutine functions."""

    Hold = Hold

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self._reader = self._writer = None
        self._read = None    # the task reading the next line
        self._parted = None  # half-closed after a QUIT, closed at the next drop
        self._task = None
        self._tasks = set()  # tasks of coroutine callbacks
        self._first = None   # a future: the first connection is up (or could not be made)

    # ------------------------------------------------------------ the public API

    def lock(self, names, wait=5.0, shared=False, lease=None, owner=None):
        """As dlock.Client.lock(); `await` it or use it in `async with`."""
        return Pending(self, _core.lock_request(names, wait, shared, lease, self._owner(owner)))

    def semaphore(self, name, limit, permits=1, wait=5.0, lease=None, owner=None):
        return Pending(self, _core.acquire_request(name, limit, permits, wait, lease, self._owner(owner)))

    async def latch(self, name, count, ttl=None):
        return await self._call(_core.latch_request(name, count, ttl))

    async def countdown(self, name, n=1):
        return await self._call(_core.countdown_request(name, n))

    async def await_latch(self, name, wait=None):
        await self._call(_core.await_request(name, wait))

    async def status(self, name):
        return await self._call(_core.status_request(name))

    async def info(self):
        return await self._call(Request("INFO", []))

    async def ping(self):
        await self._call(Request("PING", []))

    async def connect(self):
        """Connects (once); raises dlock.Error (code CONN) when no address answers."""
        if self._task is None or (self._task.done() and not self._closed):  # new, or the first try failed
            self._first = asyncio.get_running_loop().create_future()
            self._task = asyncio.ensure_future(self._run())
        await asyncio.shield(self._first)

    async def close(self):
        """Ends the session with QUIT (every hold is released at once) and stops the task."""
        if self._closed:
            return
        self._closed = True
        if self._task is None:
            return
        try:
            if self._core.live() or self._core.up:  # else there is no session to end
                await self._call(Request("QUIT", []), closing=True)
        except Error:
            pass  # the session ends by its ttl
        self._task.cancel()
        await asyncio.wait([self._task])
        self._core.fail_all(Error("CLOSED", "the client is closed"))

    async def __aenter__(self):
        await self.connect()
        return self

    async def __aexit__(self, *exc):
        await self.close()

    # ------------------------------------------------------------ calls

    @staticmethod
    def _owner(owner):
        return task_owner() if owner is None else owner

    async def _call(self, r, closing=False):
        if self._closed and not closing:
            raise Error("CLOSED", "the client is closed")
        await self.connect()
        done = asyncio.get_running_loop().create_future()
        r.on_done = lambda: done.done() or done.set_result(None)
        self._core.submit(r)
        self._flush()
        deadline = self._core.deadline(r)
        try:
            await asyncio.wait([done], timeout=None if deadline is None else max(deadline - now(), 0))
        except asyncio.CancelledError:
            self._core.abandon(r)  # a grant that comes all the same is given back
            self._flush()
            raise
        if not r.done:
            self._core.abandon(r)
            raise Error("CONN", "no reply in time" if self._writer else "no connection: %s" % self._error)
        if r.exc is not None:
            raise r.exc
        return r.result

    async def _release(self, hold):
        r = self._core.release_request(hold)
        self._flush()
        if r is not None:
            await self._call(r)

    def _flush(self):
        data = self._core.take_out() if self._writer is not None else b""
        if data:
            self._writer.write(data)

    # ------------------------------------------------------------ the connection task

    async def _run(self):
        backoff = BACKOFF_MIN
        try:
            while True:
                if self._writer is not None:
                    await self._serve()
                elif self._core.ended:
                    return
                elif await self._connect():
                    backoff = BACKOFF_MIN
                elif not self._first.done():
                    self._first.set_exception(self._error)
                    return
                else:
                    wait = self._core.tick(now())
                    self._deliver()
                    await asyncio.sleep(min(wait, backoff))
                    backoff = min(backoff * 2, BACKOFF_MAX)
                if not self._first.done():
                    self._first.set_result(None)
                self._deliver()
        finally:
            if self._read is not None:
                self._read.cancel()
            if self._writer is not None:
                self._flush()
                self._writer.close()
            if self._parted is not None:
                self._parted.close()

    async def _connect(self):
        if self._core.live() and now() >= self._core.session_end():
            return False  # tick() reports the loss first
        start, n = self._core.cur, len(self._core.addrs)
        for i in range(n):
            idx = (start + i) % n
            deadline = self._core.attempt_deadline(self._connect_timeout)
            try:
                await asyncio.wait_for(self._attempt(idx), max(deadline - now(), 0.001))
                return True
            except (Error, OSError, EOFError, ValueError, asyncio.TimeoutError) as e:
                self._failed(self._core.addrs[idx], e)
        return False

    async def _attempt(self, idx):
        addr = self._core.addrs[idx]
        if addr.path:
            reader, writer = await asyncio.open_unix_connection(addr.path, limit=READ_MAX)
        else:
            reader, writer = await asyncio.open_connection(
                addr.host, addr.port, ssl=self._ctx if addr.tls else None, limit=READ_MAX,
                server_hostname=addr.host if addr.tls else None)
        try:
            line = self._core.hello_line()
            while line is not None:
                writer.write(line.encode() + b"\n")
                while True:
                    ln = await self._readline(reader)
                    if ln.startswith("*"):
                        self._core.on_line(ln)
                    elif ln.startswith("#hello "):
                        break
                line = self._core.on_hello(ln, idx)
        except BaseException:
            writer.close()
            raise
        self._reader, self._writer = reader, writer
        self._flush()

    @staticmethod
    async def _readline(reader):
        data = await reader.readline()
        if not data.endswith(b"\n"):
            raise EOFError("connection closed")
        return data.rstrip(b"\r\n").decode("utf-8", "replace")

    async def _serve(self):
        wait = self._core.tick(now())
        self._flush()
        if self._core.drop_now:
            return self._drop()
        if self._read is None:  # one read at a time, kept across timeouts
            self._read = asyncio.ensure_future(self._readline(self._reader))
        done, _ = await asyncio.wait([self._read], timeout=wait)
        if not done:
            return
        read, self._read = self._read, None
        try:
            line = read.result()
        except (OSError, EOFError, ValueError):
            return self._drop()
        self._core.on_line(line)
        self._flush()

    def _drop(self):
        if self._read is not None:
            self._read.cancel()
            self._read = None
        if self._parted is not None:
            self._parted.close()
            self._parted = None
        if self._core.drop_now and self._writer.can_write_eof():
            self._writer.write_eof()  # as dlock.Client does: the server carries out our QUIT
            self._parted = self._writer
        else:
            self._writer.close()
        self._reader = self._writer = None
        self._core.on_drop()

    def _deliver(self):
        events, self._core.events = self._core.events, []
        for res in self._callbacks(events):
            if asyncio.iscoroutine(res):
                task = asyncio.ensure_future(res)
                self._tasks.add(task)  # a reference, so that it runs to its end
                task.add_done_callback(self._tasks.discard)
