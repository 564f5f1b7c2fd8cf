// session.go - the session's life in the loop: connecting and resuming, heartbeats, the time
// its holds are trusted, events, and what a broken connection does to requests.
//
// The session is alive until (send time of the last answered heartbeat) + ttl, on the
// monotonic clock. Its holds are trusted for less when the server tells its lock-lease (HELLO
// lease=): a dlockd that died or lost Redis renews nothing, so holds that no answer confirmed
// in time are reported lost ("jeopardy") before their Redis lease could run out, as libdlock(3)
// does.

package dlock

import (
	"bufio"
	"context"
	"errors"
	"io"
	"strconv"
	"strings"
	"time"
)

// trustOf is how long holds outlive a confirmation on a server whose lock-lease is lease (0:
// not told). It renews every lease/3, so whenever it answers a hold has 2/3 of the lease
// left; the margin (a tenth of the lease, at least 500 ms, at most half of the rest) covers
// the clocks and the time it takes to tell the application.
func trustOf(lease time.Duration) time.Duration {
	if lease <= 0 {
		return 0
	}
	left := lease * 2 / 3
	margin := lease / 10
	if margin < 500*time.Millisecond {
		margin = 500 * time.Millisecond
	}
	if margin > left/2 {
		margin = left / 2
	}
	return left - margin
}

// period is the time within which a heartbeat must be answered: the ttl, or the trust when
// shorter. Heartbeats go out every third of it.
func (c *Client) period() time.Duration {
	if c.trust > 0 && c.trust < c.ttl {
		return c.trust
	}
	return c.ttl
}

// sessionEnd is when the session may have expired, or its holds lapsed unconfirmed.
func (c *Client) sessionEnd() time.Time {
	holds := c.confirmed.Add(c.trust)
	if c.trust > 0 && holds.Before(c.safeUntil) {
		return holds
	}
	return c.safeUntil
}

func (c *Client) live() bool { return c.sid != "" && !c.dead }

// sendable says whether requests may be written now.
func (c *Client) sendable() bool { return c.link != nil && !c.link.draining }

// ---------------------------------------------------------------- connecting

// connSnap is what a round of connection attempts needs to know of the session.
type connSnap struct {
	resume  bool      // resume the session (else open a new one)
	session string    // its id
	secret  string    // its secret
	end     time.Time // a resume must be answered before then
	cur     int       // the address to try first
}

// connResult is the outcome of a round: a connection whose HELLO was answered OK, or err.
type connResult struct {
	link    *link
	fields  map[string]string // of the HELLO reply
	sent    time.Time         // when that HELLO was sent
	resumed bool              // it resumed the session asked for
	asked   string            // the session it asked to resume
	err     error
}

func (c *Client) startConnect(ctx context.Context) {
	c.connecting = true
	s := connSnap{cur: c.cur}
	if c.live() {
		s = connSnap{resume: true, session: c.sid, secret: c.secret, end: c.sessionEnd(), cur: c.cur}
	}
	go func() {
		res := c.round(ctx, s)
		select {
		case c.connCh <- res:
		case <-c.done:
			if res.link != nil {
				res.link.quit() // the client closed meanwhile: end what this HELLO opened
			}
		}
	}()
}

// reconnect plans a round of attempts after delay, unless one runs or is planned.
func (c *Client) reconnect(delay time.Duration) {
	if c.closing || c.link != nil || c.connecting || !c.retryAt.IsZero() {
		return
	}
	c.retryAt = time.Now().Add(delay)
}

func (c *Client) checkRetry(now time.Time) {
	if c.retryAt.IsZero() {
		return
	}
	if now.Before(c.retryAt) {
		c.wakeAt(c.retryAt)
		return
	}
	c.retryAt = time.Time{}
	c.startConnect(c.ctx)
}

// round tries every address once, from the session's own server on. A server's refusal says
// more than an address that does not answer, so it is the error reported when there is one.
func (c *Client) round(ctx context.Context, s connSnap) *connResult {
	var unreachable []string
	var refusal error
	for i := range c.addrs {
		if ctx.Err() != nil {
			break
		}
		res := c.attempt(ctx, (s.cur+i)%len(c.addrs), s)
		if res.err == nil {
			return res
		}
		var e *Error
		if errors.As(res.err, &e) && e.Code == CodeConn {
			unreachable = append(unreachable, e.Text)
		} else if refusal == nil {
			refusal = res.err
		}
	}
	switch {
	case ctx.Err() != nil:
		return &connResult{err: ctx.Err()}
	case refusal != nil:
		return &connResult{err: refusal}
	}
	return &connResult{err: &Error{Code: CodeConn, Text: "cannot connect to dlockd: " + strings.Join(unreachable, "; ")}}
}

// attempt connects to address idx and says HELLO, resuming the session when s says so; a
// resume that finds the session gone opens a new one on the same connection.
func (c *Client) attempt(ctx context.Context, idx int, s connSnap) *connResult {
	a := c.addrs[idx]
	now := time.Now()
	limit := now.Add(c.opts.ConnectTimeout)
	if s.resume && s.end.Before(limit) {
		limit = s.end // after that its holds were told lost
	}
	fail := func(code, why string) *connResult {
		return &connResult{err: &Error{Code: code, Text: a.text + ": " + why}}
	}
	if !limit.After(now) {
		return fail(CodeConn, "no time left to resume the session")
	}
	conn, err := dial(ctx, a, c.tlsConf, limit.Sub(now))
	if err != nil {
		return fail(CodeConn, err.Error())
	}
	rd := bufio.NewReader(conn)
	resume := s.resume
	for {
		_ = conn.SetDeadline(limit)
		sent := time.Now()
		if _, err := io.WriteString(conn, c.helloLine(s, resume)+"\n"); err != nil {
			conn.Close()
			return fail(CodeConn, err.Error())
		}
		r, err := readHello(rd)
		if err != nil {
			conn.Close()
			return fail(CodeConn, err.Error())
		}
		if resume && r.code == "NOSESSION" {
			resume = false // gone: a new session, on this connection
			limit = time.Now().Add(c.opts.ConnectTimeout)
			continue
		}
		if r.status != "OK" {
			conn.Close()
			if r.code == "" {
				return fail(CodeProto, "unexpected reply to HELLO: "+r.status)
			}
			return &connResult{err: &Error{Code: r.code, Text: a.text + ": " + r.text}}
		}
		if r.fields["session"] == "" || msOf(r.fields["ttl"]) <= 0 {
			conn.Close()
			return fail(CodeProto, "bad HELLO reply")
		}
		_ = conn.SetDeadline(time.Time{})
		return &connResult{link: newLink(a, idx, conn, rd), fields: r.fields, sent: sent,
			resumed: resume && r.fields["resumed"] == "1", asked: s.session}
	}
}

// readHello reads up to the reply of the HELLO: events before it are not for this session
// yet, and an untagged ERR is a refusal of the connection (maxclients).
func readHello(rd *bufio.Reader) (*reply, error) {
	for {
		line, err := readLine(rd)
		if err != nil {
			return nil, err
		}
		r := parseReply(line)
		if (r.tag == "" && r.status == "ERR") || r.tag == "hello" {
			return r, nil
		}
	}
}

// helloLine is the HELLO that resumes the session of s (when resume) or opens a new one.
func (c *Client) helloLine(s connSnap, resume bool) string {
	var b strings.Builder
	b.WriteString("#hello HELLO")
	if resume {
		b.WriteString(" session=" + s.session)
		if s.secret != "" {
			b.WriteString(" secret=" + s.secret)
		}
	}
	if c.opts.TTL > 0 {
		b.WriteString(" ttl=" + strconv.FormatInt(millis(c.opts.TTL), 10))
	}
	if c.opts.Name != "" {
		b.WriteString(" name=" + c.opts.Name)
	}
	if c.opts.Password != "" {
		b.WriteString(" auth=" + c.opts.Password)
	}
	return b.String()
}

// quit ends the session of a connection nobody will use, then closes it.
func (l *link) quit() {
	l.write("QUIT")
	l.shutdown()
	l.closeLater(2 * time.Second)
}

// onConnected takes the outcome of a round of connection attempts.
func (c *Client) onConnected(res *connResult) {
	c.connecting = false
	if res.err != nil {
		if c.dialing {
			c.dialing = false
			c.first <- res.err
			return
		}
		c.reconnect(c.backoff)
		if c.backoff *= 2; c.backoff > backoffMax {
			c.backoff = backoffMax
		}
		return
	}
	if c.closing {
		res.link.quit()
		return
	}
	if res.resumed && (!c.live() || c.sid != res.asked) {
		res.link.quit() // answered too late: its holds were told lost, so they must go
		c.reconnect(0)
		return
	}
	c.install(res)
	if c.dialing {
		c.dialing = false
		c.first <- nil
	}
}

// install puts a connection whose HELLO was answered in use, and sends what waits.
func (c *Client) install(res *connResult) {
	now := time.Now()
	f := res.fields
	if !res.resumed {
		c.sessionGone("expired") // the old session, if there was one, is gone
	}
	c.link = res.link
	c.cur = res.link.idx
	c.sid = f["session"]
	c.session.Store(c.sid)
	if f["secret"] != "" || !res.resumed {
		c.secret = f["secret"]
	}
	c.dead = false
	c.ttl = msOf(f["ttl"])
	c.trust = trustOf(msOf(f["lease"]))
	c.safeUntil = res.sent.Add(c.ttl)
	c.backoff = backoffMin
	// A server in jeopardy says * JEOPARDY right after the OK of a HELLO: a resume confirms
	// the holds only with the answer of a heartbeat sent now, which comes after that event.
	if res.resumed {
		c.jeopardyTo(jHB, "connection")
		c.hbAt = now
	} else {
		c.confirmed = res.sent
		c.jeopardyTo(0, "")
		c.hbAt = now.Add(c.period() / 3)
	}
	for _, req := range c.ordered() {
		if !req.sent {
			c.resend(req, res.resumed)
		}
	}
	go c.read(res.link)
	c.emit(Event{Kind: EventConnect, Address: res.link.addr.text, Session: c.sid, Resumed: res.resumed})
}

// read passes every line of l to the loop, then the error that ended it.
func (c *Client) read(l *link) {
	for {
		line, err := readLine(l.rd)
		select {
		case c.msgCh <- linkMsg{l: l, line: line, err: err}:
		case <-c.done:
			l.close()
			return
		}
		if err != nil {
			return
		}
	}
}

// linkMsg is a line read from l, or (err set) the end of l.
type linkMsg struct {
	l    *link
	line string
	err  error
}

func (c *Client) onLinkMsg(m linkMsg) {
	if m.l != c.link {
		return // a connection given up: nothing of it counts
	}
	if m.err != nil {
		c.onClose(m.l, m.l.draining && m.err == io.EOF)
		m.l.close()
		return
	}
	r := parseReply(m.line)
	switch {
	case r.event:
		c.onEvent(r)
	case strings.HasPrefix(r.tag, "hb"):
		c.onHeartbeat(r)
	case r.tag != "":
		if req := c.reqs[r.tag]; req != nil {
			c.onReply(req, r)
		}
	}
}

// onClose: the connection l broke, or ended after a half-close (clean: dlockd answered all it
// read and cancelled what waited). Requests on their way are marked; then reconnect.
func (c *Client) onClose(l *link, clean bool) {
	if l != c.link {
		return
	}
	c.link = nil
	for _, req := range c.ordered() {
		if req.sent {
			c.onDrop(req, clean)
		}
	}
	if c.closing {
		c.finishClose()
		return
	}
	if c.live() {
		c.setJeopardy(jConn, true, "connection")
	}
	c.reconnect(0)
}

// drain half-closes the connection to cancel the requests that wait on it: dlockd answers
// what it read, cancels every wait (a grant that comes after is undone) and closes. The
// requests that still want an answer are sent again once the session is resumed.
func (c *Client) drain() {
	l := c.link
	if l == nil || l.draining {
		return
	}
	l.draining = true
	l.drainUntil = time.Now().Add(c.opts.RequestTimeout)
	l.shutdown()
}

// ---------------------------------------------------------------- heartbeats and trust

func (c *Client) checkHeartbeat(now time.Time) {
	if !c.sendable() || !c.live() || c.closing {
		return
	}
	if !now.Before(c.hbAt) {
		c.heartbeat(now)
	}
	c.wakeAt(c.hbAt)
}

// heartbeat sends a tagged PING, the cheapest request: its answer renews the session, and
// confirms the holds when the server is not in jeopardy.
func (c *Client) heartbeat(now time.Time) {
	c.hbSeq++
	c.hbSent[c.hbSeq] = now
	delete(c.hbSent, c.hbSeq-hbKeep)
	c.link.write("#hb" + strconv.FormatUint(c.hbSeq, 10) + " PING")
	next := c.period() / 3
	if next < time.Millisecond {
		next = time.Millisecond
	}
	c.hbAt = now.Add(next)
}

func (c *Client) onHeartbeat(r *reply) {
	n, err := strconv.ParseUint(r.tag[2:], 10, 64)
	sent, ok := c.hbSent[n]
	if err != nil || !ok || r.status != "OK" || !c.live() {
		return
	}
	if t := sent.Add(c.ttl); t.After(c.safeUntil) {
		c.safeUntil = t
	}
	if c.jeopardy&jBackend == 0 && sent.After(c.confirmed) {
		c.confirmed = sent
	}
	c.setJeopardy(jHB, false, "")
}

// checkSession checks the deadlines of the session and its holds.
func (c *Client) checkSession(now time.Time) {
	if !c.live() || c.closing {
		return
	}
	period := c.period()
	late := c.safeUntil.Add(-c.ttl + period - period/3) // 2/3 of the period unanswered
	end := c.sessionEnd()
	if !now.Before(end) {
		c.sessionDue(now)
		return
	}
	if !now.Before(late) {
		c.setJeopardy(jHB, true, "heartbeat")
	} else {
		c.wakeAt(late)
	}
	c.wakeAt(end)
}

// sessionDue: too late, the session may be gone or its holds granted to others. Tell, and
// start afresh.
func (c *Client) sessionDue(now time.Time) {
	reason := "jeopardy"
	if !now.Before(c.safeUntil) {
		reason = "expired"
	}
	c.sessionGone(reason)
	if l := c.link; l != nil {
		c.onClose(l, false)
		l.quit() // releases the holds if the server still has them
	}
}

// sessionGone: every hold is lost, releases fail, the next HELLO starts a new session.
func (c *Client) sessionGone(reason string) {
	if !c.live() {
		return
	}
	c.dead = true
	c.secret = ""
	for s := range c.holds {
		for _, name := range s.kept() {
			c.loseHold(s, name, 0, reason)
		}
	}
	for _, req := range c.ordered() {
		if req.hold != nil {
			c.finish(req, nil, lostError(reason))
		}
	}
	c.setJeopardy(jHB|jBackend, false, "")
}

func (c *Client) loseHold(s *holdState, name string, token uint64, reason string) {
	i := indexOf(s.names, name)
	if s.lose(name, token, reason) {
		c.emit(Event{Kind: EventLost, Name: name, Token: s.tokens[i], Reason: reason})
	}
}

func (c *Client) jeopardyTo(mask int, reason string) {
	old := c.jeopardy
	c.jeopardy = mask
	if old == 0 && mask != 0 {
		c.emit(Event{Kind: EventJeopardy, Reason: reason})
	} else if old != 0 && mask == 0 {
		c.emit(Event{Kind: EventSafe})
	}
}

func (c *Client) setJeopardy(bits int, on bool, reason string) {
	if on {
		c.jeopardyTo(c.jeopardy|bits, reason)
	} else {
		c.jeopardyTo(c.jeopardy&^bits, reason)
	}
}

func (c *Client) onEvent(r *reply) {
	reason := r.fields["reason"]
	switch r.status {
	case "LOST":
		if len(r.args) == 0 {
			return
		}
		token, _ := strconv.ParseUint(r.fields["token"], 10, 64)
		if reason == "" {
			reason = "expired"
		}
		for s := range c.holds {
			c.loseHold(s, r.args[0], token, reason)
		}
	case "JEOPARDY":
		c.setJeopardy(jBackend, true, "backend")
	case "SAFE":
		c.setJeopardy(jBackend, false, "")
		c.hbAt = time.Now() // its answer confirms the holds
	case "BYE":
		// reason=shutdown: the session stays in Redis; it is resumed once the connection drops.
		if reason != "shutdown" {
			if reason == "" {
				reason = "expired"
			}
			c.sessionGone(reason)
		}
	}
}
