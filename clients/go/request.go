// request.go - tagged requests: how a call becomes a line, meets its reply, is sent again
// after a reconnect, and is given up (with whatever it was granted given back).

package dlock

import (
	"container/heap"
	"context"
	"sort"
	"strconv"
	"time"
)

const noWait = time.Duration(-1) // the request takes no wait= option

// request is one call on its way. The caller fills it in and hands it to the loop, which owns
// it from then on; the outcome comes back on done.
type request struct {
	verb    string
	body    string        // the line without tag, id= and wait=
	wait    time.Duration // noWait, 0, a duration, or WaitForever
	ctxWait bool          // wait was cut to the context's deadline
	id      bool          // carries id=<tag>: LOCK, UNLOCK, ACQUIRE, RELEASE
	own     bool          // LOCK, ACQUIRE: for an owner of its own, so undo is exact
	hold    *holdState    // UNLOCK, RELEASE: the hold it gives back
	pre     func() error  // run by the loop before anything is sent
	parse   func(*reply) (interface{}, error)
	undo    string // LOCK, ACQUIRE: the request that gives the grant back
	done    chan result

	// owned by the loop
	tag       string
	started   time.Time
	deadline  time.Time // give up then (zero: never)
	internal  bool      // nobody waits for the outcome
	quit      bool      // Close's QUIT
	sent      bool      // written on the connection in use
	dropped   bool      // was written on a connection that broke before the reply
	clean     bool      // that connection ended after a half-close: dlockd answered all it read
	resent    bool      // written again after a reconnect
	abandoned bool      // the caller gave up: a grant is given back
	delivered bool      // the outcome went to done
}

type result struct {
	v   interface{}
	err error
}

type cancelMsg struct {
	req *request
	err error // the context's
}

// do hands req to the loop and waits for its outcome, or for ctx.
func (c *Client) do(ctx context.Context, req *request) (interface{}, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if req.wait > 0 {
		if dl, ok := ctx.Deadline(); ok {
			if left := time.Until(dl); left < req.wait && left <= durationMax {
				req.wait, req.ctxWait = left, true
				if left <= 0 {
					return nil, ctxError(ctx, req)
				}
			}
		}
	}
	req.done = make(chan result, 1)
	select {
	case c.submitCh <- req:
	case <-ctx.Done():
		return nil, ctxError(ctx, req)
	case <-c.done:
		return nil, closedError()
	}
	select {
	case res := <-req.done:
		return res.v, res.err
	case <-ctx.Done():
		select {
		case c.cancelCh <- cancelMsg{req, ctx.Err()}:
		case <-c.done:
		}
		select {
		case res := <-req.done: // it was answered before the loop heard of the cancel
			return res.v, res.err
		default:
			return nil, ctxError(ctx, req)
		}
	case <-c.done:
		select {
		case res := <-req.done:
			return res.v, res.err
		default:
			return nil, closedError()
		}
	}
}

// ctxError is ctx's error; for a wait cut to its deadline, a TIMEOUT that unwraps to it.
func ctxError(ctx context.Context, req *request) error {
	err := ctx.Err()
	if err == nil {
		err = context.DeadlineExceeded
	}
	if req.ctxWait && err == context.DeadlineExceeded {
		return &Error{Code: CodeTimeout, Text: "the context's deadline passed", cause: err}
	}
	return err
}

// onSubmit takes a caller's request: checks it, tags it and sends it when connected.
func (c *Client) onSubmit(req *request) {
	if c.closing {
		c.deliver(req, nil, closedError())
		return
	}
	if req.pre != nil {
		if err := req.pre(); err != nil {
			c.deliver(req, nil, err)
			return
		}
	}
	var deadline time.Time
	if req.wait != WaitForever {
		wait := req.wait
		if wait < 0 {
			wait = 0
		}
		deadline = time.Now().Add(wait + c.opts.RequestTimeout)
	}
	c.register(req, deadline)
}

// register tags req, keeps it until its reply and sends it when a connection is up.
func (c *Client) register(req *request, deadline time.Time) {
	c.seq++
	req.tag = "c" + strconv.FormatUint(c.seq, 10)
	req.started = time.Now()
	req.deadline = deadline
	c.reqs[req.tag] = req
	if !deadline.IsZero() {
		heap.Push(&c.deadlines, deadlineEntry{deadline, req})
	}
	if c.sendable() {
		c.send(req)
	}
}

// submitInternal sends body (with an id) for nobody: the give-back of a grant.
func (c *Client) submitInternal(body string) {
	if c.closing || !c.live() {
		return // QUIT releases it all, or the session that had it is gone
	}
	req := &request{verb: "UNDO", body: body, id: true, internal: true, wait: noWait}
	c.register(req, time.Now().Add(c.opts.RequestTimeout))
}

// send writes req on the connection in use; the wait left is counted from its start. A
// request nobody waits for any more does not wait.
func (c *Client) send(req *request) {
	line := "#" + req.tag + " " + req.body
	if req.id {
		line += " id=" + req.tag
	}
	switch {
	case req.wait == noWait:
	case req.wait == WaitForever && !req.abandoned:
		line += " wait=inf"
	default:
		left := time.Duration(0)
		if !req.abandoned {
			left = time.Until(req.started.Add(req.wait))
		}
		if left < 0 {
			left = 0
		}
		line += " wait=" + strconv.FormatInt(millis(left), 10)
	}
	if len(line)+1 > lineMax {
		c.finish(req, nil, &Error{Code: "TOOBIG", Text: "request longer than max-line"})
		return
	}
	req.sent = true
	c.link.write(line)
}

// onReply takes the reply r to req.
func (c *Client) onReply(req *request, r *reply) {
	if req.quit {
		c.finish(req, nil, nil)
		c.finishClose()
		return
	}
	if req.abandoned {
		if r.status == "OK" && req.undo != "" {
			c.submitInternal(req.undo)
		}
		c.remove(req)
		return
	}
	err := c.replyError(req, r)
	if req.hold != nil && (err == nil || isCode(err, "NOTHELD") || isCode(err, CodeLost)) {
		c.forget(req.hold)
	}
	var v interface{}
	if err == nil && req.parse != nil {
		v, err = req.parse(r)
	}
	c.finish(req, v, err)
}

func isCode(err error, code string) bool {
	e, ok := err.(*Error)
	return ok && e.Code == code
}

// replyError is what reply r means for req: nil for a success, else the error.
func (c *Client) replyError(req *request, r *reply) error {
	switch r.status {
	case "OK":
		return nil
	case "BUSY":
		if req.wait > 0 { // with a wait: sent again after a reconnect, with no wait left
			return c.timeoutError(req)
		}
		free, _ := strconv.Atoi(r.fields["free"])
		e := &Error{Code: CodeBusy, Holder: r.fields["holder"], TTL: msOf(r.fields["ttl"]), Free: free}
		if e.Holder != "" {
			e.Text = "held by " + e.Holder
		} else {
			e.Text = "free permits: " + strconv.Itoa(free)
		}
		return e
	case "TIMEOUT":
		return c.timeoutError(req)
	case "ERR":
		if r.code == "NOTHELD" && req.hold != nil && req.hold.isLost() {
			return lostError(req.hold.Reason())
		}
		if r.code == "NOTHELD" && req.hold != nil && req.resent {
			return nil // the first send did it
		}
		return &Error{Code: r.code, Text: r.text}
	}
	return protoError("unexpected reply %q", r.status)
}

func (c *Client) timeoutError(req *request) error {
	e := &Error{Code: CodeTimeout, Text: "not granted within its wait"}
	if req.ctxWait {
		e.cause = context.DeadlineExceeded
	}
	return e
}

// deliver hands the outcome to the caller, once.
func (c *Client) deliver(req *request, v interface{}, err error) {
	if req.delivered || req.internal || req.done == nil {
		return
	}
	req.delivered = true
	req.done <- result{v, err}
}

// finish ends req with this outcome.
func (c *Client) finish(req *request, v interface{}, err error) {
	c.remove(req)
	if !req.abandoned {
		c.deliver(req, v, err)
	}
}

func (c *Client) remove(req *request) {
	if c.reqs[req.tag] == req {
		delete(c.reqs, req.tag)
	}
}

// ordered is the pending requests in the order they were made.
func (c *Client) ordered() []*request {
	out := make([]*request, 0, len(c.reqs))
	for _, r := range c.reqs {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool {
		return len(out[i].tag) < len(out[j].tag) ||
			len(out[i].tag) == len(out[j].tag) && out[i].tag < out[j].tag
	})
	return out
}

// checkDeadlines gives up the requests whose reply did not come in time.
func (c *Client) checkDeadlines(now time.Time) {
	for c.deadlines.Len() > 0 {
		e := c.deadlines[0]
		if e.at.After(now) {
			c.wakeAt(e.at)
			return
		}
		heap.Pop(&c.deadlines)
		if c.reqs[e.req.tag] == e.req && !e.req.abandoned && e.req.deadline.Equal(e.at) {
			c.giveUp(e.req)
		}
	}
}

// giveUp: no reply in time. A grant that comes later is given back.
func (c *Client) giveUp(req *request) {
	if req.quit {
		c.finishClose()
		return
	}
	c.deliver(req, nil, &Error{Code: CodeConn, Text: "no reply to " + req.verb + " in time"})
	if (req.sent || req.dropped) && req.undo != "" {
		req.abandoned = true
	} else {
		c.remove(req)
	}
}

// onCancel: the caller's context ended before the reply. A request that may have been granted
// is abandoned, to be given back; a LOCK or ACQUIRE that waits in a queue keeps others back,
// so it is cancelled the protocol's way, by half-closing the connection (unless the context's
// deadline ended it, which the wait sent was cut to: dlockd answers TIMEOUT by itself).
func (c *Client) onCancel(m cancelMsg) {
	req := m.req
	if c.reqs[req.tag] != req || req.abandoned {
		return
	}
	if req.hold != nil || req.quit {
		req.internal = true // a give-back goes on: its reply forgets the hold
		return
	}
	if req.undo == "" || (!req.sent && !req.dropped) {
		c.remove(req) // nothing to give back: its reply, if any, is dropped
		return
	}
	req.abandoned = true
	waits := req.wait != 0 && req.wait != noWait
	if waits && req.sent && !(req.ctxWait && m.err == context.DeadlineExceeded) {
		c.drain()
	}
}

// onDrop: the connection broke while req was on its way; it is sent again once connected.
func (c *Client) onDrop(req *request, clean bool) {
	req.sent = false
	switch {
	case req.quit:
		c.finish(req, nil, nil)
	case req.verb == "COUNTDOWN" && !clean:
		c.finish(req, nil, &Error{Code: CodeConn, Text: "connection lost; the COUNTDOWN may have been done"})
	case !req.id && (req.internal || req.abandoned):
		c.remove(req)
	default:
		req.dropped = true
		req.clean = clean
	}
}

// resend sends req again on a new connection (resumed: the same session). A request that
// was dropped with the connection goes with its id, so that dlockd acts on it once.
func (c *Client) resend(req *request, resumed bool) {
	if req.dropped && req.abandoned {
		c.remove(req)
		switch {
		case !resumed: // the session that had any grant of it is gone
		case req.own: // an owner of its own holds nothing else: give back whatever it got
			c.submitInternal(req.undo)
		case !req.clean: // ask again without waiting: the same id answers with the first reply
			req.abandoned, req.internal, req.dropped, req.resent = true, true, false, true
			c.reqs[req.tag] = req
			c.send(req)
		}
		return
	}
	if req.dropped && !resumed && req.internal {
		c.remove(req) // the old session's grants and releases are moot
		return
	}
	req.resent = req.resent || req.dropped
	req.dropped = false
	c.send(req)
}

// forget: the hold was given back (or found gone).
func (c *Client) forget(s *holdState) {
	s.released = true
	delete(c.holds, s)
}

// deadlineHeap orders requests by the time they give up.
type deadlineEntry struct {
	at  time.Time
	req *request
}

type deadlineHeap []deadlineEntry

func (h deadlineHeap) Len() int            { return len(h) }
func (h deadlineHeap) Less(i, j int) bool  { return h[i].at.Before(h[j].at) }
func (h deadlineHeap) Swap(i, j int)       { h[i], h[j] = h[j], h[i] }
func (h *deadlineHeap) Push(x interface{}) { *h = append(*h, x.(deadlineEntry)) }
func (h *deadlineHeap) Pop() interface{} {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}
