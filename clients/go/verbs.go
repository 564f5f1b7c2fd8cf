// verbs.go - the calls: locks, semaphores, latches and introspection.

package dlock

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"time"
)

// LockOptions of Lock and LockMany.
type LockOptions struct {
	// Wait is how long to wait for the lock: 0 (the default) does not wait and fails with
	// ErrBusy; WaitForever waits without limit. The context's deadline bounds it too.
	Wait   time.Duration
	Shared bool          // shared (read) mode; exclusive (write) without it
	Lease  time.Duration // the server releases the hold after this (0: never)
	// Owner of the hold within the session. Empty (the default): an owner of its own, so
	// that two calls exclude each other like two threads, and Unlock gives every count back.
	// Give the same Owner to re-enter a hold (same token, count one higher).
	Owner string
}

// AcquireOptions of Acquire.
type AcquireOptions struct {
	Limit   int           // permits of the semaphore (required; all its users must agree)
	Permits int           // permits to take (default 1)
	Wait    time.Duration // as LockOptions.Wait
	Lease   time.Duration // as LockOptions.Lease
	Owner   string        // as LockOptions.Owner
}

// owner returns the owner to send: the one given, else a fresh one only this hold has.
func (c *Client) owner(given string) (string, bool, error) {
	if given != "" {
		return given, false, checkValue("owner", given, false)
	}
	return "go." + strconv.FormatUint(c.owners.Add(1), 10), true, nil
}

// Lock takes the lock name (LOCK). It returns the hold, or an error matching ErrBusy (not
// free and o.Wait is 0), ErrTimeout (not granted within o.Wait: nothing is held), or another
// *Error. When ctx ends first the wait is cancelled on the server, and whatever it may have
// been granted is given back: nothing stays held that the caller does not know of.
func (c *Client) Lock(ctx context.Context, name string, o LockOptions) (*Hold, error) {
	return c.LockMany(ctx, []string{name}, o)
}

// LockMany takes up to 64 different locks all or nothing, one token each, as Lock does.
func (c *Client) LockMany(ctx context.Context, names []string, o LockOptions) (*Hold, error) {
	if len(names) < 1 || len(names) > 64 {
		return nil, invalid("LOCK takes 1 to 64 names")
	}
	names = append([]string(nil), names...)
	seen := map[string]bool{}
	for _, n := range names {
		if err := checkName(n); err != nil {
			return nil, err
		}
		if seen[n] {
			return nil, invalid("name %q twice", n)
		}
		seen[n] = true
	}
	if err := checkWait(o.Wait); err != nil {
		return nil, err
	}
	owner, own, err := c.owner(o.Owner)
	if err != nil {
		return nil, err
	}
	list, mode := strings.Join(names, " "), ""
	if o.Shared {
		mode = " shared"
	}
	body := "LOCK " + list + mode
	if o.Lease != 0 {
		if err := checkDuration("lease", o.Lease); err != nil {
			return nil, err
		}
		body += " lease=" + strconv.FormatInt(millis(o.Lease), 10)
	}
	body += " owner=" + owner
	undo := "UNLOCK " + list + mode + " owner=" + owner
	if own {
		undo += " all"
	}
	req := &request{verb: "LOCK", body: body, wait: o.Wait, id: true, own: own, undo: undo}
	req.parse = func(r *reply) (interface{}, error) {
		tokens, err := r.numbers("token", len(names))
		if err != nil {
			return nil, err
		}
		counts, err := r.numbers("count", len(names))
		if err != nil {
			return nil, err
		}
		h := &Hold{Name: names[0], Token: tokens[0], Count: int(counts[0]), Names: names, Tokens: tokens,
			Counts: make([]int, len(counts)), Shared: o.Shared, Owner: owner}
		for i, n := range counts {
			h.Counts[i] = int(n)
		}
		c.track(&h.holdState, names, tokens, own)
		return h, nil
	}
	v, err := c.do(ctx, req)
	if err != nil {
		return nil, err
	}
	return v.(*Hold), nil
}

// track makes s a hold of the client: `* LOST` events and the end of the session reach it.
func (c *Client) track(s *holdState, names []string, tokens []uint64, own bool) {
	s.c, s.names, s.tokens, s.own = c, names, tokens, own
	s.lostNames = map[string]bool{}
	s.lost = make(chan struct{})
	c.holds[s] = true
}

// Acquire takes permits of the semaphore name (ACQUIRE), of which at most o.Limit are held at
// once. Errors and ctx as for Lock; a BUSY error tells the free permits in Free.
func (c *Client) Acquire(ctx context.Context, name string, o AcquireOptions) (*Permits, error) {
	if o.Permits == 0 {
		o.Permits = 1
	}
	if err := checkName(name); err != nil {
		return nil, err
	}
	if err := checkCount("limit", o.Limit, 1); err != nil {
		return nil, err
	}
	if err := checkCount("permits", o.Permits, 1); err != nil {
		return nil, err
	}
	if err := checkWait(o.Wait); err != nil {
		return nil, err
	}
	owner, own, err := c.owner(o.Owner)
	if err != nil {
		return nil, err
	}
	body := "ACQUIRE " + name + " limit=" + strconv.Itoa(o.Limit) + " permits=" + strconv.Itoa(o.Permits)
	if o.Lease != 0 {
		if err := checkDuration("lease", o.Lease); err != nil {
			return nil, err
		}
		body += " lease=" + strconv.FormatInt(millis(o.Lease), 10)
	}
	body += " owner=" + owner
	undo := "RELEASE " + name + " permits=" + strconv.Itoa(o.Permits) + " owner=" + owner
	req := &request{verb: "ACQUIRE", body: body, wait: o.Wait, id: true, own: own, undo: undo}
	req.parse = func(r *reply) (interface{}, error) {
		token, err := r.numbers("token", 1)
		if err != nil {
			return nil, err
		}
		held, err := r.number("held")
		if err != nil {
			return nil, err
		}
		free, err := r.number("free")
		if err != nil {
			return nil, err
		}
		p := &Permits{Name: name, Token: token[0], Permits: o.Permits, Held: held, Free: free, Owner: owner}
		c.track(&p.holdState, []string{name}, token, own)
		return p, nil
	}
	v, err := c.do(ctx, req)
	if err != nil {
		return nil, err
	}
	return v.(*Permits), nil
}

func (c *Client) unlock(ctx context.Context, h *Hold) error {
	tail := ""
	if h.Shared {
		tail = " shared"
	}
	if h.own {
		tail += " all"
	}
	tail += " owner=" + h.Owner
	one := func(name string) string { return "UNLOCK " + name + tail }
	return c.giveBack(ctx, &h.holdState, "UNLOCK", strings.Join(h.Names, " ")+tail, one)
}

func (c *Client) release(ctx context.Context, p *Permits) error {
	permits := p.Permits
	if p.own {
		permits = p.Held
	}
	args := p.Name + " permits=" + strconv.Itoa(permits) + " owner=" + p.Owner
	return c.giveBack(ctx, &p.holdState, "RELEASE", args, func(string) string { return "RELEASE " + args })
}

// giveBack sends verb args, the UNLOCK or RELEASE of the hold s, and forgets the hold. A hold
// that was lost is ErrLost; what the server may still have of it is given back by the
// requests one(name) of the names it did not report lost (UNLOCK of several names is all or
// nothing).
func (c *Client) giveBack(ctx context.Context, s *holdState, verb, args string, one func(string) string) error {
	if s.c == nil {
		return invalid("not a hold of a client")
	}
	req := &request{verb: verb, body: verb + " " + args, id: true, hold: s, wait: noWait}
	req.pre = func() error {
		if s.released {
			return &Error{Code: "NOTHELD", Text: "given back before"}
		}
		if s.isLost() {
			kept := s.kept()
			c.forget(s)
			for _, name := range kept {
				c.submitInternal(one(name))
			}
			return lostError(s.Reason())
		}
		return nil
	}
	_, err := c.do(ctx, req)
	return err
}

// Latch creates the count-down latch name with count (LATCH), unless it exists; it returns
// the latch's count. ttl bounds its life (0: the server's default, 24 h).
func (c *Client) Latch(ctx context.Context, name string, count int, ttl time.Duration) (int, error) {
	if err := checkName(name); err != nil {
		return 0, err
	}
	if err := checkCount("count", count, 0); err != nil {
		return 0, err
	}
	body := "LATCH " + name + " count=" + strconv.Itoa(count)
	if ttl != 0 {
		if err := checkDuration("ttl", ttl); err != nil {
			return 0, err
		}
		body += " ttl=" + strconv.FormatInt(millis(ttl), 10)
	}
	return c.counted(ctx, "LATCH", body)
}

// Countdown lowers the count of the latch name by n (COUNTDOWN) and returns what is left. A
// Countdown whose connection broke on the way fails with ErrConn: it may have been done.
func (c *Client) Countdown(ctx context.Context, name string, n int) (int, error) {
	if err := checkName(name); err != nil {
		return 0, err
	}
	if err := checkCount("n", n, 1); err != nil {
		return 0, err
	}
	return c.counted(ctx, "COUNTDOWN", "COUNTDOWN "+name+" n="+strconv.Itoa(n))
}

func (c *Client) counted(ctx context.Context, verb, body string) (int, error) {
	req := &request{verb: verb, body: body, wait: noWait}
	req.parse = func(r *reply) (interface{}, error) { return r.number("count") }
	v, err := c.do(ctx, req)
	if err != nil {
		return 0, err
	}
	return v.(int), nil
}

// Await waits until the latch name is at 0 (AWAIT), for wait at most (0: only looks;
// WaitForever; the context's deadline bounds it too): nil, or an error matching ErrTimeout.
// An Await whose context ends is dropped, not cancelled on the server: it holds nothing and
// keeps nobody back.
func (c *Client) Await(ctx context.Context, name string, wait time.Duration) error {
	if err := checkName(name); err != nil {
		return err
	}
	if err := checkWait(wait); err != nil {
		return err
	}
	_, err := c.do(ctx, &request{verb: "AWAIT", body: "AWAIT " + name, wait: wait})
	return err
}

// Status is the server's answer to STATUS: who holds a name, and how many wait for it.
type Status struct {
	Name    string   `json:"name"`
	Type    string   `json:"type"`    // "lock", "semaphore", "latch", or "" when the name is not in use
	Holders []Holder `json:"holders"` // the first holds found (not for latches)
	More    int      `json:"more"`    // holds not listed
	Waiters int      `json:"waiters"` // requests queued, on every dlockd
	Limit   int      `json:"limit"`   // semaphores: the limit in force
	Free    int      `json:"free"`    // semaphores: permits nobody holds
	Count   int      `json:"count"`   // latches: the count
}

// Holder is one hold in a Status.
type Holder struct {
	Session string `json:"session"` // session id of the holder
	Client  string `json:"client"`  // its client name
	Owner   string `json:"owner"`
	Mode    string `json:"mode"`    // locks: "exclusive" or "shared"
	Count   int    `json:"count"`   // locks: the reentrancy count
	Kind    string `json:"kind"`    // semaphores: "permits"
	Permits int    `json:"permits"` // semaphores: permits held
	Token   uint64 `json:"token"`
	HeldMS  int64  `json:"held_ms"` // milliseconds since the hold was created
}

// Status asks who holds name and who waits for it (STATUS), on every dlockd of the Redis.
func (c *Client) Status(ctx context.Context, name string) (*Status, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	var st Status
	if err := c.jsonCall(ctx, "STATUS", "STATUS "+name, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// Info returns the counters of the dlockd the client is connected to (INFO).
func (c *Client) Info(ctx context.Context) (map[string]interface{}, error) {
	var m map[string]interface{}
	if err := c.jsonCall(ctx, "INFO", "INFO", &m); err != nil {
		return nil, err
	}
	return m, nil
}

func (c *Client) jsonCall(ctx context.Context, verb, body string, into interface{}) error {
	req := &request{verb: verb, body: body, wait: noWait}
	req.parse = func(r *reply) (interface{}, error) { return r.text, nil }
	v, err := c.do(ctx, req)
	if err != nil {
		return err
	}
	if err := json.Unmarshal([]byte(v.(string)), into); err != nil {
		return protoError("%s reply: %v", verb, err)
	}
	return nil
}
