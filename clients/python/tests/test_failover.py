"""Daemons that die, stop or end a session: holds survive a resume elsewhere, and holds that
cannot survive are reported lost, before anyone else can be granted them."""

import signal
import threading
import time
import unittest

import dlock
from rig import RigTest, wait_until


class Failover(RigTest):
    def resume_elsewhere(self, sig):
        """A client of daemon D (then B) holds a lock; D gets sig; the hold lives on through B."""
        d = self.rig.start_dlockd()
        lost, jeopardy = [], []
        c = self.client(d, self.b, on_lost=lost.append, on_jeopardy=lambda on, why: jeopardy.append((on, why)))
        name = self.n("x")
        h = c.lock(name)
        sid = c.session
        self.rig.kill(d, sig)
        c.ping()  # answered once the session is resumed on B
        self.assertEqual(c.session, sid)
        (holder,) = self.holders(name, self.b)
        self.assertEqual((holder["session"], holder["token"]), (sid, h.token), "the same hold")
        wait_until(lambda: jeopardy == [(True, "connection"), (False, None)], what="JEOPARDY then SAFE")
        self.assertFalse(h.lost.is_set())
        self.assertEqual(lost, [])
        h.unlock()
        self.assertEqual(self.holders(name, self.b), [])

    def test_sigkill(self):
        self.resume_elsewhere(signal.SIGKILL)

    def test_shutdown(self):
        self.resume_elsewhere(signal.SIGTERM)  # * BYE reason=shutdown keeps the session

    def test_waiting_lock_follows_the_session(self):
        d = self.rig.start_dlockd()
        holder, waiter = self.client(self.b), self.client(d, self.b)
        name = self.n("x")
        h = holder.lock(name)
        got = []
        t = threading.Thread(target=lambda: got.append(waiter.lock(name, wait=30)))
        t.start()
        wait_until(lambda: self.rig.status(self.b, name)["waiters"] == 1, what="the LOCK to wait")
        self.rig.kill(d)
        waiter.ping()  # resumed on B, and the LOCK sent again there
        h.unlock()
        t.join(30)
        self.assertEqual(len(got), 1)
        self.assertGreater(got[0].token, h.token)
        self.assertEqual([x["session"] for x in self.holders(name, self.b)], [waiter.session])

    def test_kill_verb(self):
        lost = []
        c = self.client(on_lost=lost.append)
        name = self.n("x")
        h, sem = c.lock(name), c.semaphore(self.n("sem"), 2)
        sid = c.session
        self.assertEqual(self.rig.admin(self.b, "KILL " + sid), "OK")  # through the other daemon
        self.assertTrue(h.lost.wait(15) and sem.lost.wait(15))
        self.assertEqual((h.lost_reason, sem.lost_reason), ("admin", "admin"))
        wait_until(lambda: set(lost) == {h, sem}, what="on_lost for both")
        with self.assertRaises(dlock.Lost):
            h.unlock()
        with c.lock(name, wait=10) as h2:  # the client goes on in a new session
            self.assertNotEqual(c.session, sid)
            self.assertGreater(h2.token, h.token)

    def test_daemon_gone_for_good(self):
        """The only daemon is killed: the hold is reported lost before another client, waiting
        on another daemon, is granted it when the dead daemon's lease lapses."""
        d = self.rig.start_dlockd()
        lost_at = []
        c = self.client(d, on_lost=lambda hold: lost_at.append(time.monotonic()))
        other = self.client(self.b)
        name = self.n("x")
        h = c.lock(name)
        self.rig.kill(d)
        h2 = other.lock(name, wait=30)
        granted_at = time.monotonic()
        self.assertTrue(h.lost.is_set(), "lost before the lock passed on")
        self.assertLess(lost_at[0], granted_at)
        self.assertIn(h.lost_reason, ("expired", "jeopardy"))
        self.assertGreater(h2.token, h.token)
        h2.unlock()

    def test_daemon_silent(self):
        """The daemon stops answering (SIGSTOP): after the trust window the hold is lost, and the
        QUIT the client left releases it once the daemon runs again."""
        d = self.rig.start_dlockd()
        c = self.client(d, ttl=10.0)  # the ttl outlasts the trust of a 6 s lock-lease (3.4 s)
        name = self.n("x")
        h = c.lock(name)
        d.proc.send_signal(signal.SIGSTOP)
        try:
            self.assertTrue(h.lost.wait(15))
            self.assertEqual(h.lost_reason, "jeopardy")
        finally:
            d.proc.send_signal(signal.SIGCONT)
        # The heartbeats queued meanwhile renew the session as the daemon reads them: only the
        # QUIT can release the hold within the ttl (10 s) from now.
        wait_until(lambda: self.holders(name, self.b) == [], 8, "the hold released by the QUIT")


if __name__ == "__main__":
    unittest.main()
