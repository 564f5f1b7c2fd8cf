// failover_test.go - sessions across daemons: a daemon killed under a held lock (the client
// resumes on the other one, the hold survives with its token, a waiting request is sent
// again); the operator's KILL (the hold is reported lost); the trust window running out while
// no daemon answers, and while the daemon cannot reach Redis (the holds are reported lost
// before their Redis lease could end).

package dlock

import (
	"syscall"
	"testing"
	"time"
)

func TestFailoverKeepsHold(t *testing.T) {
	ctx := testCtx(t, 60*time.Second)
	redis, B := shared(t)
	A := startDlockd(t, redis, "--lock-lease", "6s")
	ev := newEvents()
	c := dialT(t, []string{A.addr, B.addr}, &Options{Name: "survivor", OnEvent: ev.add})
	other := dialT(t, []string{B.addr}, &Options{Name: "other"})
	h, err := c.Lock(ctx, "fo", LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	blocker, err := other.Lock(ctx, "fo-wait", LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *Hold, 1)
	go func() {
		h, err := c.Lock(ctx, "fo-wait", LockOptions{Wait: time.Minute})
		if err != nil {
			t.Error(err)
		}
		got <- h
	}()
	waitFor(t, "c queued", 10*time.Second, func() bool { return waiters(t, other, "fo-wait") == 1 })
	sid := c.Session()
	A.kill()
	e := ev.wait(t, "resumed connect", 20*time.Second, func(e Event) bool { return e.Kind == EventConnect && e.Resumed })
	if e.Address != B.addr || e.Session != sid || c.Session() != sid {
		t.Fatalf("connect %+v, session %s", e, c.Session())
	}
	st, err := other.Status(ctx, "fo")
	if err != nil || len(st.Holders) != 1 || st.Holders[0].Session != sid || st.Holders[0].Token != h.Token {
		t.Fatalf("status %+v %v", st, err)
	}
	_, err = other.Lock(ctx, "fo", LockOptions{})
	mustBe(t, err, ErrBusy)
	if err := blocker.Unlock(ctx); err != nil { // the wait was sent again on B, with what is left of it
		t.Fatal(err)
	}
	w := <-got
	if w == nil || w.Token <= blocker.Token {
		t.Fatalf("waiter %+v", w)
	}
	select {
	case <-h.Lost():
		t.Fatalf("lost: %s", h.Reason())
	default:
	}
	if err := w.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := h.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	next, err := other.Lock(ctx, "fo", LockOptions{})
	if err != nil || next.Token <= h.Token {
		t.Fatalf("after: %+v %v", next, err)
	}
	_ = next.Unlock(ctx)
	for _, e := range ev.list() {
		if e.Kind == EventLost {
			t.Fatalf("event %+v", e)
		}
	}
}

func TestShutdownMovesSession(t *testing.T) {
	ctx := testCtx(t, 60*time.Second)
	redis, B := shared(t)
	A := startDlockd(t, redis, "--lock-lease", "6s")
	ev := newEvents()
	c := dialT(t, []string{A.addr, B.addr}, &Options{Name: "moving", OnEvent: ev.add})
	h, err := c.Lock(ctx, "moving", LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sid := c.Session()
	A.signal(syscall.SIGTERM) // * BYE reason=shutdown: the session stays in Redis
	e := ev.wait(t, "resumed connect", 20*time.Second, func(e Event) bool { return e.Kind == EventConnect && e.Resumed })
	if e.Address != B.addr || e.Session != sid {
		t.Fatalf("connect %+v", e)
	}
	st, err := c.Status(ctx, "moving")
	if err != nil || len(st.Holders) != 1 || st.Holders[0].Token != h.Token || h.Reason() != "" {
		t.Fatalf("status %+v %v, lost %q", st, err, h.Reason())
	}
	if err := h.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	_ = A.cmd.Wait()
	if code := A.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("dlockd exited %d after SIGTERM", code)
	}
}

func TestOperatorKill(t *testing.T) {
	ctx := testCtx(t, 60*time.Second)
	_, B := shared(t)
	ev := newEvents()
	c := dialT(t, []string{B.addr}, &Options{Name: "victim", OnEvent: ev.add})
	h, err := c.Lock(ctx, "killed", LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sid := c.Session()
	if got := admin(t, B, "KILL "+sid); got != "OK" {
		t.Fatalf("KILL: %s", got)
	}
	select {
	case <-h.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("the hold is not lost")
	}
	if h.Reason() != "admin" {
		t.Fatalf("reason %q", h.Reason())
	}
	e := ev.wait(t, "lost", 5*time.Second, func(e Event) bool { return e.Kind == EventLost })
	if e.Name != "killed" || e.Token != h.Token || e.Reason != "admin" {
		t.Fatalf("event %+v", e)
	}
	mustBe(t, h.Unlock(ctx), ErrLost)
	ev.wait(t, "new session", 10*time.Second, func(e Event) bool {
		return e.Kind == EventConnect && !e.Resumed && e.Session != sid
	})
	again, err := c.Lock(ctx, "killed", LockOptions{})
	if err != nil || again.Token <= h.Token || c.Session() == sid {
		t.Fatalf("again: %+v %v, session %s", again, err, c.Session())
	}
	_ = again.Unlock(ctx)
}

func TestTrustRunsOutWithoutDaemon(t *testing.T) {
	ctx := testCtx(t, 60*time.Second)
	redis, B := shared(t)
	C := startDlockd(t, redis, "--lock-lease", "6s") // holds trusted 3.4 s without an answer
	ev := newEvents()
	// A ttl of 5 s: the holds of the dead daemon end with their lease, 6 s after the last renewal.
	c := dialT(t, []string{C.addr}, &Options{Name: "stranded", TTL: 5 * time.Second, RequestTimeout: time.Second,
		OnEvent: ev.add})
	h, err := c.Lock(ctx, "stranded", LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	start := time.Now()
	C.kill()
	select {
	case <-h.Lost():
	case <-time.After(15 * time.Second):
		t.Fatal("the hold is not lost")
	}
	// Lost before another client could be granted it (6 s after the last renewal at most), and
	// not before the trust window could have run out (1.1 s between heartbeats).
	if took := time.Since(start); took < 1500*time.Millisecond || took > 6*time.Second || h.Reason() != "jeopardy" {
		t.Fatalf("lost after %v: %s", took, h.Reason())
	}
	ev.wait(t, "lost", time.Second, func(e Event) bool { return e.Kind == EventLost && e.Reason == "jeopardy" })
	if evs := ev.list(); len(evs) < 3 || evs[1].Kind != EventJeopardy || evs[1].Reason != "connection" {
		t.Fatalf("events %+v", evs)
	}
	mustBe(t, h.Unlock(ctx), ErrLost)
	_, err = c.Lock(ctx, "x", LockOptions{}) // no daemon: no reply after RequestTimeout
	mustBe(t, err, ErrConn)
	other := dialT(t, []string{B.addr}, nil)
	next, err := other.Lock(ctx, "stranded", LockOptions{Wait: 20 * time.Second}) // once its lease ends
	if err != nil || next.Token <= h.Token {
		t.Fatalf("after: %+v %v", next, err)
	}
	_ = next.Unlock(ctx)
	c.Close() // while disconnected
}

func TestTrustRunsOutInJeopardy(t *testing.T) {
	ctx := testCtx(t, 60*time.Second)
	redis := startRedis(t)
	C := startDlockd(t, redis, "--lock-lease", "3s", "--backend-timeout", "1s")
	ev := newEvents()
	c := dialT(t, []string{C.addr}, &Options{Name: "in-jeopardy", OnEvent: ev.add})
	h, err := c.Lock(ctx, "jeopardy", LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sid := c.Session()
	redis.signal(syscall.SIGSTOP)
	select {
	case <-h.Lost(): // heartbeats answered in jeopardy confirm nothing
	case <-time.After(20 * time.Second):
		redis.signal(syscall.SIGCONT)
		t.Fatal("the hold is not lost")
	}
	redis.signal(syscall.SIGCONT)
	if h.Reason() != "jeopardy" {
		t.Fatalf("reason %q", h.Reason())
	}
	ev.wait(t, "jeopardy backend", time.Second, func(e Event) bool { return e.Kind == EventJeopardy && e.Reason == "backend" })
	mustBe(t, h.Unlock(ctx), ErrLost)
	ev.wait(t, "new session", 20*time.Second, func(e Event) bool { return e.Kind == EventConnect && e.Session != sid })
	again, err := c.Lock(ctx, "jeopardy", LockOptions{Wait: 20 * time.Second})
	if err != nil || again.Token <= h.Token {
		t.Fatalf("again: %+v %v", again, err)
	}
	_ = again.Unlock(ctx)
}

// A hold lost while the client was away is told when it comes back: dlockd keeps the * LOST
// and sends it right after the OK of the HELLO that resumes the session.
func TestLostWhileAway(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	_, B := shared(t)
	r := startRelay(t, B.addr, nil)
	ev := newEvents()
	c := dialT(t, []string{r.addr}, &Options{Name: "away", OnEvent: ev.add})
	sid := c.Session()
	h, err := c.Lock(ctx, "away", LockOptions{Lease: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	kept, err := c.Lock(ctx, "away-kept", LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r.refuse.Store(true)
	r.breakAll()
	time.Sleep(600 * time.Millisecond) // the lease ends meanwhile; the holds are trusted 3.4 s
	if h.Reason() != "" {
		t.Fatalf("lost while away: %s", h.Reason())
	}
	r.refuse.Store(false)
	ev.wait(t, "resumed connect", 10*time.Second, func(e Event) bool { return e.Kind == EventConnect && e.Resumed })
	select {
	case <-h.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("the lease ended and the hold is not lost")
	}
	if h.Reason() != "lease" || kept.Reason() != "" || c.Session() != sid {
		t.Fatalf("lost %q, kept %q, session %s then %s", h.Reason(), kept.Reason(), sid, c.Session())
	}
	if err := kept.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
