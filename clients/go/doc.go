// Package dlock is the Go client of dlockd, a lock manager whose state lives in Redis: fenced
// locks (exclusive or shared, one name or several at once), counting semaphores and
// count-down latches, held by one session per Client that heartbeats, reconnects and resumes
// by itself. It follows libdlock(3), the C library, and uses only Go's standard library.
//
//	c, err := dlock.Dial(ctx, nil, &dlock.Options{Name: "billing-7"}) // $DLOCK_ADDR
//	h, err := c.Lock(ctx, "invoices", dlock.LockOptions{Wait: 5 * time.Second})
//	// ... pass h.Token to what the lock protects; stop when <-h.Lost() fires
//	err = h.Unlock(ctx)
//
// One goroutine per Client owns its state: it reads the connection (through a reader
// goroutine), sends a tagged PING every third of the session ttl (or of the time holds are
// trusted, when shorter), multiplexes the callers' tagged requests over the one connection,
// and after a broken connection tries the addresses in turn with a backoff from 50 ms to 2 s,
// resuming the session with its secret (HELLO session= secret=). Requests that were on
// their way are sent again, LOCK, UNLOCK, ACQUIRE and RELEASE with the same id= so that the
// server acts on them once.
//
// A hold is trusted for 2/3 of the server's lock-lease (told by HELLO's lease=), less a
// margin, after the last heartbeat answered by a server not in jeopardy; after a resume, the
// first heartbeat answered confirms the holds again. When that runs out, or the server says
// `* LOST`, or the session ended, the hold's Lost channel is closed: stop using what it
// protects, since someone else may hold it by then.
package dlock
