// basic_test.go - the verbs against one real dlockd: tokens, BUSY and TIMEOUT, owners, shared
// and multi-name locks, leases, semaphores, latches, errors, heartbeats, addresses, Close.

package dlock

import (
	"context"
	"errors"
	"testing"
	"time"
)

func twoClients(t *testing.T) (*proc, *Client, *Client) {
	_, d := shared(t)
	return d, dialT(t, []string{d.addr}, &Options{Name: "client-a"}), dialT(t, []string{d.addr}, &Options{Name: "client-b"})
}

func TestTokensIncrease(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	_, a, b := twoClients(t)
	h1, err := a.Lock(ctx, "tok", LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h1.Token == 0 || h1.Count != 1 || h1.Name != "tok" {
		t.Fatalf("hold %+v", h1)
	}
	st, err := b.Status(ctx, "tok")
	if err != nil {
		t.Fatal(err)
	}
	if st.Type != "lock" || len(st.Holders) != 1 || st.Holders[0].Session != a.Session() ||
		st.Holders[0].Client != "client-a" || st.Holders[0].Token != h1.Token || st.Holders[0].Mode != "exclusive" {
		t.Fatalf("status %+v", st)
	}
	if err := h1.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	last := h1.Token
	for i, c := range []*Client{b, a, b} {
		h, err := c.Lock(ctx, "tok", LockOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if h.Token <= last {
			t.Fatalf("grant %d: token %d after %d", i, h.Token, last)
		}
		last = h.Token
		if err := h.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if st, _ := a.Status(ctx, "tok"); st.Type != "" || len(st.Holders) != 0 {
		t.Fatalf("unused name: %+v", st)
	}
	mustBe(t, h1.Unlock(ctx), ErrNotHeld) // given back before
}

func TestBusyAndTimeout(t *testing.T) {
	ctx := testCtx(t, 60*time.Second)
	_, a, b := twoClients(t)
	h, err := a.Lock(ctx, "bz", LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.Lock(ctx, "bz", LockOptions{})
	var e *Error
	if !errors.Is(err, ErrBusy) || !errors.As(err, &e) || e.Holder != "client-a" || e.TTL <= 0 {
		t.Fatalf("busy: %#v", err)
	}
	start := time.Now()
	_, err = b.Lock(ctx, "bz", LockOptions{Wait: 300 * time.Millisecond})
	mustBe(t, err, ErrTimeout)
	if errors.Is(err, context.DeadlineExceeded) || time.Since(start) < 300*time.Millisecond {
		t.Fatalf("timeout %v after %v", err, time.Since(start))
	}
	if st, _ := a.Status(ctx, "bz"); len(st.Holders) != 1 || st.Waiters != 0 {
		t.Fatalf("after the timeout: %+v", st)
	}
	got := make(chan *Hold, 1)
	go func() {
		hb, err := b.Lock(ctx, "bz", LockOptions{Wait: time.Minute})
		if err != nil {
			t.Error(err)
		}
		got <- hb
	}()
	waitFor(t, "b queued", 10*time.Second, func() bool { return waiters(t, a, "bz") == 1 })
	if err := h.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	hb := <-got
	if hb == nil || hb.Token <= h.Token {
		t.Fatalf("waiter got %+v after %d", hb, h.Token)
	}
	if st, _ := a.Status(ctx, "bz"); st.Holders[0].Session != b.Session() {
		t.Fatalf("holder %+v", st)
	}
	if err := hb.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestOwners(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	_, a, _ := twoClients(t)
	h, err := a.Lock(ctx, "own", LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = a.Lock(ctx, "own", LockOptions{}) // the same client, another owner
	mustBe(t, err, ErrBusy)
	r1, err := a.Lock(ctx, "own2", LockOptions{Owner: "worker-1"})
	if err != nil {
		t.Fatal(err)
	}
	r2, err := a.Lock(ctx, "own2", LockOptions{Owner: "worker-1"})
	if err != nil {
		t.Fatal(err)
	}
	if r2.Token != r1.Token || r2.Count != 2 {
		t.Fatalf("reentry %+v after %+v", r2, r1)
	}
	if err := r2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	st, _ := a.Status(ctx, "own2")
	if len(st.Holders) != 1 || st.Holders[0].Owner != "worker-1" || st.Holders[0].Count != 1 {
		t.Fatalf("after one unlock: %+v", st)
	}
	if err := r1.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := h.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if st, _ := a.Status(ctx, "own2"); st.Type != "" {
		t.Fatalf("still in use: %+v", st)
	}
}

func TestShared(t *testing.T) {
	ctx := testCtx(t, 60*time.Second)
	d, a, b := twoClients(t)
	c := dialT(t, []string{d.addr}, &Options{Name: "client-c"})
	s1, err := a.Lock(ctx, "rw", LockOptions{Shared: true})
	if err != nil {
		t.Fatal(err)
	}
	s2, err := b.Lock(ctx, "rw", LockOptions{Shared: true})
	if err != nil {
		t.Fatal(err)
	}
	st, _ := a.Status(ctx, "rw")
	if len(st.Holders) != 2 || st.Holders[0].Mode != "shared" || st.Holders[1].Mode != "shared" || !s1.Shared {
		t.Fatalf("two readers: %+v", st)
	}
	_, err = c.Lock(ctx, "rw", LockOptions{})
	mustBe(t, err, ErrBusy)
	got := make(chan *Hold, 1)
	go func() {
		x, err := c.Lock(ctx, "rw", LockOptions{Wait: time.Minute})
		if err != nil {
			t.Error(err)
		}
		got <- x
	}()
	waitFor(t, "writer queued", 10*time.Second, func() bool { return waiters(t, a, "rw") == 1 })
	_, err = a.Lock(ctx, "rw", LockOptions{Shared: true}) // a queued writer holds readers back
	mustBe(t, err, ErrBusy)
	if err := s1.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-got:
		t.Fatal("the writer was granted beside a reader")
	case <-time.After(200 * time.Millisecond):
	}
	if err := s2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	x := <-got
	if x == nil || x.Shared || x.Token <= s2.Token {
		t.Fatalf("writer %+v", x)
	}
	if err := x.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestMultiName(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	_, a, b := twoClients(t)
	hb, err := b.Lock(ctx, "m2", LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = a.LockMany(ctx, []string{"m1", "m2", "m3"}, LockOptions{})
	mustBe(t, err, ErrBusy)
	if st, _ := a.Status(ctx, "m1"); st.Type != "" {
		t.Fatalf("a part is held: %+v", st)
	}
	if err := hb.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	m, err := a.LockMany(ctx, []string{"m1", "m2", "m3"}, LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Tokens) != 3 || len(m.Counts) != 3 || m.Token != m.Tokens[0] || m.Tokens[1] <= hb.Token {
		t.Fatalf("hold %+v", m)
	}
	for i, name := range m.Names {
		st, _ := b.Status(ctx, name)
		if len(st.Holders) != 1 || st.Holders[0].Token != m.Tokens[i] || m.Counts[i] != 1 {
			t.Fatalf("%s: %+v", name, st)
		}
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for _, name := range m.Names {
		if st, _ := b.Status(ctx, name); st.Type != "" {
			t.Fatalf("%s still held: %+v", name, st)
		}
	}
	if _, err := a.LockMany(ctx, []string{"d", "d"}, LockOptions{}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a name twice: %v", err)
	}
}

func TestLeaseLost(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	d, _, b := twoClients(t)
	ev := newEvents()
	a := dialT(t, []string{d.addr}, &Options{OnEvent: ev.add})
	h, err := a.Lock(ctx, "leased", LockOptions{Lease: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("the lease ended and the hold is not lost")
	}
	if h.Reason() != "lease" {
		t.Fatalf("reason %q", h.Reason())
	}
	e := ev.wait(t, "lost", 5*time.Second, func(e Event) bool { return e.Kind == EventLost })
	if e.Name != "leased" || e.Token != h.Token || e.Reason != "lease" {
		t.Fatalf("event %+v", e)
	}
	err = h.Unlock(ctx)
	var le *Error
	if !errors.Is(err, ErrLost) || !errors.As(err, &le) || le.Reason != "lease" {
		t.Fatalf("unlock of a lost hold: %v", err)
	}
	mustBe(t, h.Unlock(ctx), ErrNotHeld)
	again, err := b.Lock(ctx, "leased", LockOptions{})
	if err != nil || again.Token <= h.Token {
		t.Fatalf("after the lease: %+v %v", again, err)
	}
	_ = again.Unlock(ctx)
}

func TestSemaphore(t *testing.T) {
	ctx := testCtx(t, 60*time.Second)
	d, a, b := twoClients(t)
	c := dialT(t, []string{d.addr}, &Options{Name: "client-c"})
	p1, err := a.Acquire(ctx, "sem", AcquireOptions{Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	if p1.Permits != 1 || p1.Held != 1 || p1.Free != 1 {
		t.Fatalf("permits %+v", p1)
	}
	p2, err := b.Acquire(ctx, "sem", AcquireOptions{Limit: 2})
	if err != nil || p2.Token <= p1.Token {
		t.Fatalf("second %+v %v", p2, err)
	}
	_, err = c.Acquire(ctx, "sem", AcquireOptions{Limit: 2})
	var e *Error
	if !errors.Is(err, ErrBusy) || !errors.As(err, &e) || e.Free != 0 {
		t.Fatalf("busy: %v", err)
	}
	_, err = c.Acquire(ctx, "sem", AcquireOptions{Limit: 3})
	if !errors.Is(err, ErrMismatch) || !errors.As(err, &e) || e.Code != "MISMATCH" {
		t.Fatalf("mismatch: %v", err)
	}
	got := make(chan *Permits, 1)
	go func() {
		p, err := c.Acquire(ctx, "sem", AcquireOptions{Limit: 2, Wait: time.Minute})
		if err != nil {
			t.Error(err)
		}
		got <- p
	}()
	waitFor(t, "acquire queued", 10*time.Second, func() bool { return waiters(t, a, "sem") == 1 })
	if err := p1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	p3 := <-got
	if p3 == nil || p3.Token <= p2.Token {
		t.Fatalf("waiter %+v", p3)
	}
	st, _ := a.Status(ctx, "sem")
	if st.Type != "semaphore" || st.Limit != 2 || st.Free != 0 || len(st.Holders) != 2 || st.Holders[0].Kind != "permits" {
		t.Fatalf("status %+v", st)
	}
	for _, p := range []*Permits{p2, p3} {
		if err := p.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if st, _ := a.Status(ctx, "sem"); st.Type != "" {
		t.Fatalf("still in use: %+v", st)
	}
	all, err := a.Acquire(ctx, "sem", AcquireOptions{Limit: 3, Permits: 3}) // unused again: a new limit
	if err != nil || all.Held != 3 || all.Free != 0 {
		t.Fatalf("all permits: %+v %v", all, err)
	}
	if err := all.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestLatch(t *testing.T) {
	ctx := testCtx(t, 60*time.Second)
	_, a, b := twoClients(t)
	if n, err := a.Latch(ctx, "batch", 2, time.Hour); err != nil || n != 2 {
		t.Fatalf("latch: %d %v", n, err)
	}
	if n, err := b.Latch(ctx, "batch", 5, 0); err != nil || n != 2 { // it exists: its count
		t.Fatalf("latch again: %d %v", n, err)
	}
	mustBe(t, a.Await(ctx, "batch", 0), ErrTimeout)
	done := make(chan error, 1)
	go func() { done <- b.Await(ctx, "batch", WaitForever) }()
	if n, err := a.Countdown(ctx, "batch", 1); err != nil || n != 1 {
		t.Fatalf("countdown: %d %v", n, err)
	}
	if st, _ := a.Status(ctx, "batch"); st.Type != "latch" || st.Count != 1 {
		t.Fatalf("status %+v", st)
	}
	select {
	case err := <-done:
		t.Fatalf("awaited before 0: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	if n, err := a.Countdown(ctx, "batch", 1); err != nil || n != 0 {
		t.Fatalf("countdown to 0: %d %v", n, err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := a.Await(ctx, "batch", 0); err != nil { // gone: at once
		t.Fatal(err)
	}
}

func TestErrors(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	_, a, _ := twoClients(t)
	if _, err := a.Latch(ctx, "typed", 1, 0); err != nil {
		t.Fatal(err)
	}
	_, err := a.Lock(ctx, "typed", LockOptions{})
	var e *Error
	if !errors.Is(err, ErrWrongType) || !errors.As(err, &e) || e.Code != "WRONGTYPE" || e.Text == "" {
		t.Fatalf("wrong type: %#v", err)
	}
	_, err = a.Acquire(ctx, "typed", AcquireOptions{Limit: 1})
	mustBe(t, err, ErrWrongType)
	if _, err := a.Countdown(ctx, "typed", 1); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []func() error{
		func() error { _, err := a.Lock(ctx, "two words", LockOptions{}); return err },
		func() error { _, err := a.Lock(ctx, "x\n#z QUIT", LockOptions{}); return err },
		func() error { _, err := a.Lock(ctx, "x", LockOptions{Owner: "o wait=inf"}); return err },
		func() error { _, err := a.Lock(ctx, "x=y", LockOptions{}); return err },
		func() error { _, err := a.Lock(ctx, "}x", LockOptions{}); return err },
		func() error { _, err := a.Lock(ctx, "x", LockOptions{Wait: -time.Second}); return err },
		func() error { _, err := a.Acquire(ctx, "x", AcquireOptions{}); return err }, // limit is required
		func() error { _, err := a.Countdown(ctx, "x", 0); return err },
	} {
		mustBe(t, bad(), ErrInvalid)
	}
	if _, err := a.Status(ctx, "x"); err != nil { // still usable
		t.Fatal(err)
	}
}

func TestHeartbeatsKeepShortSession(t *testing.T) {
	ctx := testCtx(t, 60*time.Second)
	d, a, _ := twoClients(t)
	ev := newEvents()
	c := dialT(t, []string{d.addr}, &Options{Name: "short", TTL: 2 * time.Second, OnEvent: ev.add})
	sid := c.Session()
	held, err := c.Lock(ctx, "hb-held", LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	blocker, err := a.Lock(ctx, "hb-wait", LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *Hold, 1)
	go func() {
		h, err := c.Lock(ctx, "hb-wait", LockOptions{Wait: time.Minute})
		if err != nil {
			t.Error(err)
		}
		got <- h
	}()
	time.Sleep(5 * time.Second) // 2.5 ttl: a waiting request does not renew the session, heartbeats do
	if err := blocker.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	h := <-got
	if h == nil || c.Session() != sid {
		t.Fatalf("hold %+v, session %s then %s", h, sid, c.Session())
	}
	select {
	case <-held.Lost():
		t.Fatalf("lost: %s", held.Reason())
	default:
	}
	if st, _ := a.Status(ctx, "hb-held"); len(st.Holders) != 1 || st.Holders[0].Session != sid {
		t.Fatalf("status %+v", st)
	}
	for _, e := range ev.list() {
		if e.Kind == EventLost || (e.Kind == EventConnect && e.Session != sid) {
			t.Fatalf("event %+v", e)
		}
	}
	_ = h.Unlock(ctx)
	_ = held.Unlock(ctx)
}

func TestAddressesAndDial(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	_, d := shared(t)
	t.Setenv("DLOCK_ADDR", "127.0.0.1:1,unix:"+sharedSock)
	c := dialT(t, nil, &Options{Name: "by-env"})
	h, err := c.Lock(ctx, "env", LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a := dialT(t, []string{d.addr}, nil)
	if st, _ := a.Status(ctx, "env"); len(st.Holders) != 1 || st.Holders[0].Client != "by-env" {
		t.Fatalf("status %+v", st)
	}
	_ = h.Unlock(ctx)
	_, err = Dial(ctx, []string{"127.0.0.1:1"}, &Options{ConnectTimeout: 3 * time.Second})
	var e *Error
	if !errors.Is(err, ErrConn) || !errors.As(err, &e) || e.Text == "" {
		t.Fatalf("dial of nothing: %v", err)
	}
	_, err = Dial(ctx, []string{"127.0.0.1:0x"}, nil)
	mustBe(t, err, ErrInvalid)
}

func TestPassword(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	redis, _ := shared(t)
	d := startDlockd(t, redis, "--requirepass", "s3cret", "--auth-fail-delay", "100ms")
	c := dialT(t, []string{d.addr}, &Options{Name: "authed", Password: "s3cret"})
	h, err := c.Lock(ctx, "pw", LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := c.Status(ctx, "pw"); len(st.Holders) != 1 || st.Holders[0].Client != "authed" {
		t.Fatalf("status %+v", st)
	}
	_ = h.Unlock(ctx)
	_, err = Dial(ctx, []string{d.addr}, &Options{Password: "wrong"})
	mustBe(t, err, ErrNoAuth)
	_, err = Dial(ctx, []string{d.addr}, nil)
	mustBe(t, err, ErrNoAuth)
}

func TestClose(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	d, a, _ := twoClients(t)
	c, err := Dial(ctx, []string{d.addr}, &Options{Name: "closer"})
	if err != nil {
		t.Fatal(err)
	}
	h, err := c.Lock(ctx, "closing", LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire(ctx, "closing-sem", AcquireOptions{Limit: 1}); err != nil {
		t.Fatal(err)
	}
	hx, err := a.Lock(ctx, "closing-wait", LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	blocked := make(chan error, 1)
	go func() {
		_, err := c.Lock(ctx, "closing-wait", LockOptions{Wait: WaitForever, Owner: "x"})
		blocked <- err
	}()
	waitFor(t, "c queued", 10*time.Second, func() bool { return waiters(t, a, "closing-wait") == 1 })
	c.Close()
	mustBe(t, <-blocked, ErrClosed)
	next, err := a.Lock(ctx, "closing", LockOptions{})
	if err != nil || next.Token <= h.Token {
		t.Fatalf("after close: %+v %v", next, err)
	}
	if p, err := a.Acquire(ctx, "closing-sem", AcquireOptions{Limit: 1}); err != nil {
		t.Fatal(err)
	} else {
		_ = p.Release(ctx)
	}
	_, err = c.Lock(ctx, "closing", LockOptions{})
	mustBe(t, err, ErrClosed)
	c.Close() // twice is fine
	_ = next.Unlock(ctx)
	_ = hx.Unlock(ctx)
}
