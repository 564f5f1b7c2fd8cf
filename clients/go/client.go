// client.go - a Client: one dlockd session, kept by one goroutine (the loop) that owns every
// piece of its state; callers, the connection's reader and the connector talk to it over
// channels.

package dlock

import (
	"context"
	"crypto/tls"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

const (
	backoffMin = 50 * time.Millisecond // between rounds of reconnection attempts, doubling
	backoffMax = 2 * time.Second
	hbKeep     = 16 // heartbeats whose send time is remembered
)

// Options of Dial. The zero value is fine.
type Options struct {
	Name           string        // client name shown in BUSY and STATUS (default: the peer address)
	TTL            time.Duration // session ttl (default: the server's, 10 s)
	Password       string        // for a server with requirepass (sent as HELLO auth=)
	ConnectTimeout time.Duration // one connection attempt with its HELLO (default 5 s)
	RequestTimeout time.Duration // how long a call waits for its reply beyond its own wait (default 5 s)

	// For tls:// addresses: TLS (default: system roots, TLS 1.2 or later) with the CA and the
	// client certificate of these PEM files, else of $DLOCK_TLS_CA, $DLOCK_TLS_CERT and
	// $DLOCK_TLS_KEY, where TLS does not set RootCAs or Certificates itself.
	TLS     *tls.Config
	TLSCA   string
	TLSCert string
	TLSKey  string

	// OnEvent, when set, is called with every Event, in order, on a goroutine of its own.
	OnEvent func(Event)
}

// EventKind tells what an Event reports.
type EventKind int

// The kinds of Event.
const (
	EventConnect  EventKind = iota + 1 // a connection is up: Address, Session, Resumed
	EventLost                          // a hold is lost: Name, Token, Reason
	EventJeopardy                      // holds may be lost soon: Reason (connection, heartbeat, backend)
	EventSafe                          // the jeopardy is over
)

// Event is something that happened to the session, for Options.OnEvent.
type Event struct {
	Kind    EventKind
	Address string // EventConnect: the address that answered
	Session string // EventConnect: the session id
	Resumed bool   // EventConnect: the session (and its holds) went on
	Name    string // EventLost: the name of the hold
	Token   uint64 // EventLost: its token
	Reason  string // EventLost, EventJeopardy: why
}

// Jeopardy reasons in force, as bits.
const (
	jConn    = 1 << iota // disconnected
	jHB                  // no heartbeat answered in time (or not yet, after a resume)
	jBackend             // the server said * JEOPARDY
)

// Client is a dlockd session: made by Dial, safe for use by any number of goroutines, ended by
// Close. It heartbeats, reconnects and resumes by itself.
type Client struct {
	addrs   []address
	opts    Options
	tlsConf *tls.Config

	submitCh chan *request    // callers' requests
	cancelCh chan cancelMsg   // callers that gave up
	msgCh    chan linkMsg     // lines read, and the end of a connection
	connCh   chan *connResult // the connector's outcome
	closeCh  chan struct{}    // closed by Close
	done     chan struct{}    // closed when the loop has ended
	ctx      context.Context  // cancelled when the loop ends
	stop     context.CancelFunc
	first    chan error // the outcome of the first connection, for Dial
	closeMu  sync.Once
	session  atomic.Value  // string: the session id, for Session()
	owners   atomic.Uint64 // owners made up for holds
	events   *eventQueue   // nil without OnEvent

	// Everything below belongs to the loop.
	sid        string               // session id ("" before the first HELLO)
	secret     string               // what resumes the session
	dead       bool                 // the session is gone: the next HELLO starts a new one
	ttl        time.Duration        // session ttl granted
	trust      time.Duration        // how long holds outlive a confirmation (0: the ttl bounds them)
	confirmed  time.Time            // send time of the last answer that showed the holds well
	safeUntil  time.Time            // send time of the last answered heartbeat + ttl
	jeopardy   int                  // j* bits in force
	link       *link                // the connection in use, once its HELLO is answered
	cur        int                  // index of the address the session lives on
	connecting bool                 // a round of connection attempts runs
	retryAt    time.Time            // when the next round starts (zero: none planned)
	backoff    time.Duration        // before the next round after a failed one
	reqs       map[string]*request  // tag -> request waiting for its reply
	deadlines  deadlineHeap         // when requests give up
	seq        uint64               // request tags
	hbSeq      uint64               // heartbeat tags
	hbSent     map[uint64]time.Time // heartbeat number -> send time
	hbAt       time.Time            // when the next heartbeat is due
	holds      map[*holdState]bool  // holds not given back (lost ones too)
	closing    bool                 // Close was called
	finished   bool                 // the loop ends now
	wake       time.Time            // the loop's next timer
	dialing    bool                 // the first round (Dial's) runs
	dialCtx    context.Context      // Dial's context, for its round
}

// Dial opens a session with the first dlockd of addrs that answers. Each item of addrs is an
// address or several separated by commas, in DLOCK_ADDR syntax: HOST:PORT, HOST (port 7411),
// [IPV6]:PORT, unix:PATH or tls://HOST:PORT. Without any, $DLOCK_ADDR, else 127.0.0.1:7411.
// Every address must be a dlockd sharing the same Redis. opts may be nil.
func Dial(ctx context.Context, addrs []string, opts *Options) (*Client, error) {
	c, err := newClient(addrs, opts)
	if err != nil {
		return nil, err
	}
	c.dialCtx = ctx
	go c.loop()
	select {
	case err = <-c.first:
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func newClient(addrs []string, opts *Options) (*Client, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = 5 * time.Second
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = 5 * time.Second
	}
	if err := checkOptions(&o); err != nil {
		return nil, err
	}
	list, err := parseAddresses(addrs)
	if err != nil {
		return nil, err
	}
	c := &Client{addrs: list, opts: o, submitCh: make(chan *request), cancelCh: make(chan cancelMsg),
		msgCh: make(chan linkMsg), connCh: make(chan *connResult), closeCh: make(chan struct{}),
		done: make(chan struct{}), first: make(chan error, 1), reqs: map[string]*request{},
		hbSent: map[uint64]time.Time{}, holds: map[*holdState]bool{}, backoff: backoffMin, dialing: true}
	c.ctx, c.stop = context.WithCancel(context.Background())
	c.session.Store("")
	for _, a := range list {
		if a.tls {
			if c.tlsConf, err = tlsConfig(&o); err != nil {
				return nil, err
			}
			break
		}
	}
	if o.OnEvent != nil {
		c.events = newEventQueue(o.OnEvent)
	}
	return c, nil
}

func checkOptions(o *Options) error {
	if o.Name != "" {
		if err := checkValue("client name", o.Name, false); err != nil {
			return err
		}
	}
	if o.Password != "" && !printable(o.Password) {
		return invalid("bad password")
	}
	if o.TTL != 0 {
		return checkDuration("ttl", o.TTL)
	}
	return nil
}

// Session returns the id of the session ("" before the first connection). It changes when
// the session was lost and a new one started.
func (c *Client) Session() string { return c.session.Load().(string) }

// Close ends the session with QUIT, which releases every hold at once, and closes the
// connection. Calls still waiting, and later calls, fail with ErrClosed. It returns once the
// client has stopped; it always returns nil.
func (c *Client) Close() error {
	c.closeMu.Do(func() { close(c.closeCh) })
	<-c.done
	return nil
}

// ---------------------------------------------------------------- the loop

// loop owns the client's state until Close has done its work.
func (c *Client) loop() {
	defer c.ending()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	closeCh := c.closeCh
	c.startConnect(c.dialCtx)
	for !c.finished {
		now := time.Now()
		c.tick(now)
		if c.finished {
			break
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(c.wake.Sub(now))
		select {
		case req := <-c.submitCh:
			c.onSubmit(req)
		case m := <-c.cancelCh:
			c.onCancel(m)
		case m := <-c.msgCh:
			c.onLinkMsg(m)
		case r := <-c.connCh:
			c.onConnected(r)
		case <-closeCh:
			closeCh = nil
			c.startClose()
		case <-timer.C:
		}
	}
}

func (c *Client) ending() {
	c.finishClose()
	close(c.done)
	c.stop()
	if c.events != nil {
		c.events.close()
	}
}

// tick does what is due at now and sets c.wake to the next time something will be.
func (c *Client) tick(now time.Time) {
	c.wake = now.Add(time.Hour)
	c.checkSession(now)
	c.checkHeartbeat(now)
	c.checkRetry(now)
	c.checkDeadlines(now)
	if l := c.link; l != nil && l.draining {
		if now.Before(l.drainUntil) {
			c.wakeAt(l.drainUntil)
		} else {
			c.onClose(l, false) // no EOF in time: as any broken connection
			l.close()
		}
	}
}

func (c *Client) wakeAt(t time.Time) {
	if t.Before(c.wake) {
		c.wake = t
	}
}

func (c *Client) emit(e Event) {
	if c.events != nil {
		c.events.push(e)
	}
}

// startClose fails every request, then ends the session with QUIT when it can.
func (c *Client) startClose() {
	c.closing = true
	c.retryAt = time.Time{}
	for _, req := range c.ordered() {
		c.finish(req, nil, closedError())
	}
	if l := c.link; l != nil && !l.draining && !c.dead && c.sid != "" {
		wait := c.opts.RequestTimeout
		if wait > 2*time.Second {
			wait = 2 * time.Second
		}
		req := &request{verb: "QUIT", body: "QUIT", quit: true, internal: true, wait: noWait}
		c.register(req, time.Now().Add(wait))
		return
	}
	c.finishClose()
}

// finishClose closes the connection and forgets every hold; the loop then ends.
func (c *Client) finishClose() {
	if c.finished {
		return
	}
	c.finished = true
	if c.link != nil {
		c.link.close()
		c.link = nil
	}
	for s := range c.holds {
		s.released = true
	}
	c.holds = map[*holdState]bool{}
	if c.dialing {
		c.dialing = false
		c.first <- closedError()
	}
}

// ---------------------------------------------------------------- events for the application

// eventQueue calls fn with every event pushed, in order, on a goroutine of its own, so that the
// loop never waits for the application.
type eventQueue struct {
	fn     func(Event)
	mu     sync.Mutex
	q      []Event
	closed bool
	wake   chan struct{}
}

func newEventQueue(fn func(Event)) *eventQueue {
	e := &eventQueue{fn: fn, wake: make(chan struct{}, 1)}
	go e.run()
	return e
}

func (e *eventQueue) push(ev Event) {
	e.mu.Lock()
	e.q = append(e.q, ev)
	e.mu.Unlock()
	e.poke()
}

// close lets the goroutine end once it has delivered what was pushed.
func (e *eventQueue) close() {
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	e.poke()
}

func (e *eventQueue) poke() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

func (e *eventQueue) run() {
	for range e.wake {
		for {
			e.mu.Lock()
			if len(e.q) == 0 {
				closed := e.closed
				e.mu.Unlock()
				if closed {
					return
				}
				break
			}
			ev := e.q[0]
			e.q = e.q[1:]
			e.mu.Unlock()
			e.fn(ev)
		}
	}
}

func msOf(s string) time.Duration {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0
	}
	return time.Duration(n) * time.Millisecond
}
