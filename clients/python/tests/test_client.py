"""The blocking client against a real dlockd: locks, semaphores, latches, errors."""

import os
import threading
import time
import unittest

import dlock
from rig import RigTest, wait_until


class Addresses(unittest.TestCase):
    def test_syntax(self):
        a = dlock.parse_addrs("h1:7000, unix:/run/d.sock\ttls://h2:7001 [::1]:7002 h3 ::1")
        self.assertEqual([(x.host, x.port, x.path, x.tls) for x in a], [
            ("h1", 7000, None, False), (None, None, "/run/d.sock", False), ("h2", 7001, None, True),
            ("::1", 7002, None, False), ("h3", 7411, None, False), ("::1", 7411, None, False)])
        self.assertEqual(dlock.parse_addrs(["x:1"])[0].port, 1)
        for bad in ("h:", "h:x", "h:70000", "[::1", "unix:", "tls://"):
            with self.assertRaises(ValueError, msg=bad):
                dlock.parse_addrs(bad)

    def test_environment(self):
        old = os.environ.pop("DLOCK_ADDR", None)
        try:
            self.assertEqual(dlock.parse_addrs()[0].text, "127.0.0.1:7411")
            os.environ["DLOCK_ADDR"] = "a:1,b:2"
            self.assertEqual([x.text for x in dlock.parse_addrs()], ["a:1", "b:2"])
        finally:
            os.environ.pop("DLOCK_ADDR", None)
            if old is not None:
                os.environ["DLOCK_ADDR"] = old

    def test_nothing_listening(self):
        with self.assertRaises(dlock.Error) as cm:
            dlock.Client("127.0.0.1:1", connect_timeout=2)
        self.assertEqual(cm.exception.code, "CONN")


class Locks(RigTest):
    def test_tokens_increase(self):
        c = self.client(name="tokens")
        name = self.n("x")
        tokens = []
        for _ in range(3):
            with c.lock(name) as h:
                tokens.append(h.token)
                self.assertEqual(h.count, 1)
                (holder,) = self.holders(name)
                self.assertEqual((holder["session"], holder["client"], holder["token"], holder["mode"]),
                                 (c.session, "tokens", h.token, "exclusive"))
            self.assertTrue(h.released)
            self.assertEqual(self.holders(name), [])
        self.assertEqual(tokens, sorted(set(tokens)), "fencing tokens strictly increase")

    def test_busy_then_timeout_then_granted(self):
        c1, c2 = self.client(name="first"), self.client(self.b, name="second")
        name = self.n("x")
        h1 = c1.lock(name)
        with self.assertRaises(dlock.Busy) as cm:
            c2.lock(name, wait=0)
        self.assertEqual(cm.exception.code, "BUSY")
        self.assertEqual(cm.exception.fields["holder"], "first")
        t0 = time.monotonic()
        with self.assertRaises(dlock.Timeout):
            c2.lock(name, wait=0.5)
        self.assertGreaterEqual(time.monotonic() - t0, 0.45)
        threading.Timer(0.3, h1.unlock).start()
        with c2.lock(name, wait=30) as h2:  # granted as soon as the first lets go
            self.assertGreater(h2.token, h1.token)
            wait_until(lambda: h1.released, what="the first client's UNLOCK answered")

    def test_threads_and_reentry(self):
        c = self.client()
        name = self.n("x")
        h1 = c.lock(name)
        h2 = c.lock(name)  # the same thread again: reentrant, same hold
        self.assertEqual((h2.token, h2.count), (h1.token, 2))
        seen = []

        def other():
            try:
                c.lock(name, wait=0)
            except dlock.Busy:
                seen.append("busy")

        t = threading.Thread(target=other)
        t.start()
        t.join()
        self.assertEqual(seen, ["busy"], "another thread of the same client is another owner")
        h2.unlock()
        self.assertEqual(self.holders(name)[0]["count"], 1)
        h1.unlock()
        self.assertEqual(self.holders(name), [])

    def test_shared(self):
        c1, c2, c3 = self.client(), self.client(self.b), self.client()
        name = self.n("rw")
        with c1.lock(name, shared=True) as r1, c2.lock(name, shared=True, wait=0) as r2:
            self.assertTrue(r1.shared and r2.shared)
            self.assertEqual({h["mode"] for h in self.holders(name)}, {"shared"})
            self.assertEqual(len(self.holders(name)), 2)
            with self.assertRaises(dlock.Busy):
                c3.lock(name, wait=0)
        with c3.lock(name, wait=0) as w:
            self.assertGreater(w.token, max(r1.token, r2.token))

    def test_multi_name(self):
        c1, c2 = self.client(), self.client(self.b)
        a, b, x = self.n("a"), self.n("b"), self.n("c")
        with c1.lock([a, b]) as h:
            self.assertEqual(len(h.tokens), 2)
            self.assertEqual(h.token, h.tokens[0])
            with self.assertRaises(dlock.Busy):
                c2.lock([x, b], wait=0)
            self.assertEqual(self.holders(x), [], "all or nothing: nothing of a refused request is held")
        self.assertEqual(self.holders(a) + self.holders(b), [])
        with c2.lock([x, b], wait=0) as h2:
            self.assertEqual(h2.names, [x, b])

    def test_lease_runs_out(self):
        lost = []
        c = self.client(on_lost=lost.append)
        name = self.n("x")
        h = c.lock(name, lease=0.5)
        self.assertTrue(h.lost.wait(15), "the lease ran out")
        self.assertEqual(h.lost_reason, "lease")
        wait_until(lambda: lost == [h], what="on_lost")
        with self.assertRaises(dlock.Lost):
            h.unlock()
        h.unlock()  # once only
        with c.lock(name, wait=0) as h2:
            self.assertGreater(h2.token, h.token)

    def test_lost_in_with_block(self):
        c = self.client()
        with self.assertRaises(dlock.Lost):
            with c.lock(self.n("x"), lease=0.3) as h:
                h.lost.wait(15)


class Primitives(RigTest):
    def test_semaphore(self):
        c1, c2, c3 = self.client(), self.client(self.b), self.client()
        name = self.n("pool")
        s1 = c1.semaphore(name, 3, permits=2)
        self.assertEqual((s1.count, s1.free), (2, 1))
        with c2.semaphore(name, 3) as s2:
            self.assertEqual(s2.free, 0)
            with self.assertRaises(dlock.Busy) as cm:
                c3.semaphore(name, 3, wait=0)
            self.assertEqual(cm.exception.fields["free"], "0")
            with self.assertRaises(dlock.Error) as cm:
                c3.semaphore(name, 5, wait=0)
            self.assertEqual(cm.exception.code, "MISMATCH")
        s1.release()
        with c3.semaphore(name, 3, permits=3, wait=0) as s3:
            self.assertEqual(s3.free, 0)

    def test_latch(self):
        c1, c2 = self.client(), self.client(self.b)
        name = self.n("batch")
        self.assertEqual(c1.latch(name, 2), 2)
        self.assertEqual(c2.latch(name, 5), 2, "an existing latch keeps its count")
        with self.assertRaises(dlock.Timeout):
            c2.await_latch(name, wait=0)
        done = []
        waiter = threading.Thread(target=lambda: done.append(c2.await_latch(name, wait=30) or "released"))
        waiter.start()
        self.assertEqual(c1.countdown(name), 1)
        time.sleep(0.2)
        self.assertEqual(done, [])
        self.assertEqual(c1.countdown(name), 0)
        waiter.join(30)
        self.assertEqual(done, ["released"])
        c1.await_latch(name, wait=0)

    def test_errors(self):
        c = self.client()
        name = self.n("sem")
        with c.semaphore(name, 2):
            with self.assertRaises(dlock.Error) as cm:
                c.lock(name, wait=0)
            self.assertEqual(cm.exception.code, "WRONGTYPE")
        for bad in ("", "a b", "a=b", "x" * 201):
            with self.assertRaises(ValueError):
                c.lock(bad)
        with self.assertRaises(dlock.Error) as cm:
            c.lock([self.n("a"), self.n("a")])
        self.assertEqual(cm.exception.code, "SYNTAX")
        self.assertEqual(c.status(self.n("unused"))["type"], None)

    def test_close_releases(self):
        c = dlock.Client(self.a.addr)
        name = self.n("x")
        h = c.lock(name)
        sem = c.semaphore(self.n("s"), 1)
        c.close()
        self.assertTrue(h.released and sem.released and not h.lost.is_set())
        self.assertEqual(self.holders(name), [])
        with self.assertRaises(dlock.Error) as cm:
            c.lock(name)
        self.assertEqual(cm.exception.code, "CLOSED")
        c.close()

    def test_close_while_waiting(self):
        holder, c = self.client(self.b), dlock.Client(self.a.addr)
        name = self.n("x")
        holder.lock(name)
        errors = []

        def wait_forever():
            try:
                c.lock(name, wait=None)
            except dlock.Error as e:
                errors.append(e.code)

        t = threading.Thread(target=wait_forever)
        t.start()
        wait_until(lambda: self.rig.status(self.a, name)["waiters"] == 1, what="the LOCK to queue")
        c.close()
        t.join(15)
        self.assertEqual(errors, ["CLOSED"])


class Connecting(RigTest):
    def test_unix_socket_and_password(self):
        path = os.path.join(self.rig.tmp, "d.sock")
        self.rig.start_dlockd("--listen", "unix:" + path, "--requirepass", "s3cret", "--auth-fail-delay", "10ms")
        with self.assertRaises(dlock.Error) as cm:
            dlock.Client("unix:" + path, password="wrong")
        self.assertEqual(cm.exception.code, "NOAUTH")
        c = self.client(addrs="unix:" + path, password="s3cret")
        with c.lock(self.n("x")) as h:
            self.assertEqual(c.status(self.n("x"))["holders"][0]["token"], h.token)

    def test_blocking_call_in_callback(self):
        seen = []

        def on_lost(hold):
            try:
                c.ping()
            except dlock.Error as e:
                seen.append(e.code)
            try:
                hold.unlock()  # a lost hold: nothing to wait for
            except dlock.Lost:
                seen.append("LOST")

        c = self.client(on_lost=on_lost)
        c.lock(self.n("x"), lease=0.2)
        wait_until(lambda: seen, what="the callback")
        self.assertEqual(seen, ["INVAL", "LOST"])
        c.ping()


if __name__ == "__main__":
    unittest.main()
