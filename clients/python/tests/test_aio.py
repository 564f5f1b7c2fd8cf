"""The asyncio client against a real dlockd."""

import asyncio
import signal
import unittest

import dlock
import dlock.aio
from rig import RigTest


async def eventually(pred, timeout=15.0, what="condition"):
    """Awaits until pred() (a coroutine function or a function) is true."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while True:
        v = pred()
        if asyncio.iscoroutine(v):
            v = await v
        if v:
            return v
        if loop.time() > end:
            raise AssertionError("timed out after %.0fs waiting for %s" % (timeout, what))
        await asyncio.sleep(0.02)


class Aio(RigTest):
    def run_async(self, coro):
        asyncio.run(asyncio.wait_for(coro, 60))

    def aclient(self, *daemons, **kw):
        kw.setdefault("ttl", 3.0)
        return dlock.aio.Client([d.addr for d in daemons or (self.a,)], **kw)

    def test_lock_tasks_and_reentry(self):
        async def main():
            async with self.aclient(name="aio") as c:
                name = self.n("x")
                async with c.lock(name) as h:
                    (holder,) = (await c.status(name))["holders"]
                    self.assertEqual((holder["token"], holder["client"]), (h.token, "aio"))

                    async def other_task():
                        with self.assertRaises(dlock.Busy):
                            await c.lock(name, wait=0)

                    await asyncio.create_task(other_task())  # another task is another owner
                    again = await c.lock(name)  # this task again: reentrant
                    self.assertEqual((again.token, again.count), (h.token, 2))
                    await again.unlock()
                h2 = await c.lock(name, wait=0)
                self.assertGreater(h2.token, h.token)
                await h2.unlock()
                self.assertEqual((await c.status(name))["holders"], [])
        self.run_async(main())

    def test_mutual_exclusion(self):
        """Tasks on two clients (two daemons) take turns, in token order."""
        async def main():
            name, inside, order = self.n("x"), [], []
            async with self.aclient() as c1, self.aclient(self.b) as c2:
                async def worker(c):
                    for _ in range(3):
                        async with c.lock(name, wait=30) as h:
                            self.assertEqual(inside, [], "nobody else inside")
                            inside.append(h)
                            order.append(h.token)
                            await asyncio.sleep(0.01)
                            inside.remove(h)
                await asyncio.gather(*(worker(c) for c in (c1, c2, c1, c2)))
            self.assertEqual(len(order), 12)
            self.assertEqual(order, sorted(set(order)), "tokens grow in the order of the grants")
        self.run_async(main())

    def test_semaphore_and_latch(self):
        async def main():
            async with self.aclient() as c1, self.aclient(self.b) as c2:
                sem, latch = self.n("sem"), self.n("latch")
                async with c1.semaphore(sem, 2, permits=2) as s:
                    self.assertEqual(s.free, 0)
                    with self.assertRaises(dlock.Busy):
                        await c2.semaphore(sem, 2, wait=0)
                async with c2.semaphore(sem, 2, wait=0) as s2:
                    self.assertEqual(s2.free, 1)
                self.assertEqual(await c1.latch(latch, 2), 2)
                waiter = asyncio.ensure_future(c2.await_latch(latch, wait=30))
                self.assertEqual(await c1.countdown(latch), 1)
                await asyncio.sleep(0.1)
                self.assertFalse(waiter.done())
                self.assertEqual(await c1.countdown(latch), 0)
                await waiter
                self.assertEqual(await c1.latch(self.n("other"), 1), 1)
                with self.assertRaises(dlock.Timeout):
                    await c2.await_latch(self.n("other"), wait=0.2)
        self.run_async(main())

    def test_cancelled_wait_gives_back(self):
        """A task cancelled while its LOCK waits: the grant that comes later is given back."""
        async def main():
            async with self.aclient() as c1, self.aclient(self.b) as c2:
                name = self.n("x")
                held = await c1.lock(name)
                waiting = asyncio.ensure_future(c2.lock(name, wait=30))
                await eventually(self.waiters_of(c1, name), what="the LOCK to queue")
                waiting.cancel()
                await held.unlock()  # grants the cancelled request, which c2 gives back
                await eventually(self.free_of(c1, name), what="the grant given back")
                h = await c1.lock(name, wait=0)
                self.assertGreater(h.token, held.token)
                await h.unlock()
        self.run_async(main())

    @staticmethod
    def waiters_of(c, name):
        async def check():
            return (await c.status(name))["waiters"] == 1
        return check

    @staticmethod
    def free_of(c, name):
        async def check():
            st = await c.status(name)
            return st["holders"] == [] and st["waiters"] == 0
        return check

    def test_resume_then_kill(self):
        """SIGKILL of the daemon: resumed on B with the hold; then KILL: lost, reported."""
        d = self.rig.start_dlockd()

        async def main():
            lost = []

            async def on_lost(hold):  # a coroutine callback runs as a task
                lost.append((hold, hold.lost_reason))

            async with self.aclient(d, self.b, on_lost=on_lost) as c:
                name = self.n("x")
                h = await c.lock(name)
                sid = c.session
                self.rig.kill(d, signal.SIGKILL)
                await c.ping()  # answered on the resumed session
                self.assertEqual(c.session, sid)
                self.assertEqual([(x["session"], x["token"]) for x in (await c.status(name))["holders"]],
                                 [(sid, h.token)])
                self.assertFalse(h.lost.is_set())
                self.assertEqual(self.rig.admin(self.b, "KILL " + sid), "OK")
                await eventually(lambda: lost, what="on_lost")
                self.assertEqual(lost, [(h, "admin")])
                with self.assertRaises(dlock.Lost):
                    await h.unlock()
                async with c.lock(name) as h2:  # a new session goes on
                    self.assertNotEqual(c.session, sid)
                    self.assertGreater(h2.token, h.token)
        self.run_async(main())

    def test_close_while_waiting(self):
        async def main():
            async with self.aclient(self.b) as holder:
                c = self.aclient()
                name = self.n("x")
                await holder.lock(name)
                waiting = asyncio.ensure_future(c.lock(name, wait=None))
                await eventually(self.waiters_of(holder, name), what="the LOCK to queue")
                await c.close()
                with self.assertRaises(dlock.Error) as cm:
                    await asyncio.wait_for(waiting, 15)
                self.assertEqual(cm.exception.code, "CLOSED")
        self.run_async(main())

    def test_closed(self):
        async def main():
            c = self.aclient()
            h = await c.lock(self.n("x"))  # connects on the first request
            await c.close()
            self.assertTrue(h.released)
            with self.assertRaises(dlock.Error) as cm:
                await c.ping()
            self.assertEqual(cm.exception.code, "CLOSED")
        self.run_async(main())
        self.assertEqual(self.holders(self.n("x")), [])


if __name__ == "__main__":
    unittest.main()
