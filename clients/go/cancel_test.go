// cancel_test.go - a context that ends while a Lock waits: the wait leaves the queue on the
// server, the other waits of the client go on, and no grant stays that nobody knows of.

package dlock

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"
)

func TestCancelWaitingLock(t *testing.T) {
	ctx := testCtx(t, 60*time.Second)
	d, a, _ := twoClients(t)
	ev := newEvents()
	b := dialT(t, []string{d.addr}, &Options{Name: "canceller", OnEvent: ev.add})
	sid := b.Session()
	blocker, err := a.Lock(ctx, "cx", LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	other, err := a.Lock(ctx, "cx-other", LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	otherGot := make(chan *Hold, 1)
	go func() { // a wait of the same client that must not be disturbed
		h, err := b.Lock(ctx, "cx-other", LockOptions{Wait: time.Minute})
		if err != nil {
			t.Error(err)
		}
		otherGot <- h
	}()
	waitFor(t, "the other wait queued", 10*time.Second, func() bool { return waiters(t, a, "cx-other") == 1 })

	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := b.Lock(cctx, "cx", LockOptions{Wait: WaitForever})
		done <- err
	}()
	waitFor(t, "the wait queued", 10*time.Second, func() bool { return waiters(t, a, "cx") == 1 })
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled Lock: %v", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the cancelled Lock did not return")
	}
	waitFor(t, "the wait gone from the queue", 10*time.Second, func() bool { return waiters(t, a, "cx") == 0 })

	// The other wait was sent again on the resumed session, and is granted.
	if err := other.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	h := <-otherGot
	if h == nil || h.Token <= other.Token || b.Session() != sid {
		t.Fatalf("other wait: %+v; session %s then %s", h, sid, b.Session())
	}
	if err := h.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// Nobody holds cx after its holder lets go: the cancelled wait was given nothing.
	if err := blocker.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if st, _ := a.Status(ctx, "cx"); st.Type != "" {
		t.Fatalf("cx after the cancel: %+v", st)
	}
	resumed := 0
	for _, e := range ev.list() {
		if e.Kind == EventLost {
			t.Fatalf("event %+v", e)
		}
		if e.Kind == EventConnect && e.Resumed && e.Session == sid {
			resumed++
		}
	}
	if resumed != 1 {
		t.Fatalf("resumed %d times: %+v", resumed, ev.list())
	}
}

func TestDeadlineOfWaitingLock(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	_, a, b := twoClients(t)
	blocker, err := a.Lock(ctx, "dl", LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = b.Lock(dctx, "dl", LockOptions{Wait: WaitForever})
	if !errors.Is(err, ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock past its context's deadline: %v", err)
	}
	if took := time.Since(start); took < 450*time.Millisecond || took > 3*time.Second {
		t.Fatalf("took %v", took)
	}
	waitFor(t, "the wait gone from the queue", 10*time.Second, func() bool { return waiters(t, a, "dl") == 0 })
	if err := blocker.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if st, _ := a.Status(ctx, "dl"); st.Type != "" {
		t.Fatalf("dl after the deadline: %+v", st)
	}
	_, err = b.Lock(dctx, "dl", LockOptions{}) // the context is over: nothing is sent
	mustBe(t, err, context.DeadlineExceeded)
}

// A cancel that meets the grant: either the caller gets the hold, or the client gives it back.
func TestCancelRacingGrant(t *testing.T) {
	ctx := testCtx(t, 60*time.Second)
	_, a, b := twoClients(t)
	got, gaveUp := 0, 0
	for i := 0; i < 12; i++ {
		name := "race-" + strconv.Itoa(i)
		blocker, err := a.Lock(ctx, name, LockOptions{Wait: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithCancel(ctx)
		type outcome struct {
			h   *Hold
			err error
		}
		done := make(chan outcome, 1)
		go func() {
			h, err := b.Lock(cctx, name, LockOptions{Wait: WaitForever})
			done <- outcome{h, err}
		}()
		waitFor(t, "queued", 10*time.Second, func() bool { return waiters(t, a, name) == 1 })
		go func() { _ = blocker.Unlock(ctx) }()
		time.Sleep(time.Duration(i%4) * time.Millisecond)
		cancel()
		o := <-done
		if o.err == nil {
			got++
			if err := o.h.Unlock(ctx); err != nil {
				t.Fatalf("round %d: unlock: %v", i, err)
			}
		} else if errors.Is(o.err, context.Canceled) {
			gaveUp++
		} else {
			t.Fatalf("round %d: %v", i, o.err)
		}
		// Whatever happened, b is left holding nothing: a takes the lock at once.
		h, err := a.Lock(ctx, name, LockOptions{Wait: 10 * time.Second})
		if err != nil {
			st, _ := a.Status(ctx, name)
			t.Fatalf("round %d: %v; status %+v", i, err, st)
		}
		_ = h.Unlock(ctx)
	}
	t.Logf("granted %d, given up %d", got, gaveUp)
}
