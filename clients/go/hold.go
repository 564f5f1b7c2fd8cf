// hold.go - what a grant hands back: a lock hold (one or several names) or semaphore permits.

package dlock

import (
	"context"
	"sync"
)

// holdState is what a Hold and a Permits share: the names the server may still hold for it,
// and whether it was lost. The client's loop changes it; Lost and Reason may be read anywhere.
type holdState struct {
	c      *Client
	names  []string
	tokens []uint64
	own    bool // the owner is this hold's alone: giving it back takes every count

	// owned by the client's loop
	released  bool            // given back (or the client closed)
	lostNames map[string]bool // names reported lost

	mu     sync.Mutex
	reason string        // why it was lost; "" while held
	lost   chan struct{} // closed when it is lost
}

// Lost returns a channel that is closed when the hold is lost although it was not given
// back: the server said `* LOST` (its lease ran out, Redis lost it, the operator freed it),
// the session ended or moved, or no answer confirmed it in time. Someone else may hold it by
// then: stop using what it protects at once.
func (s *holdState) Lost() <-chan struct{} { return s.lost }

// Reason says why the hold was lost (lease, expired, backend, admin, jeopardy, moved), or ""
// while it is not.
func (s *holdState) Reason() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reason
}

// lose marks name lost if it is this hold's (token 0: whatever its token). It returns true
// when this made the hold lost.
func (s *holdState) lose(name string, token uint64, reason string) bool {
	i := indexOf(s.names, name)
	if s.released || i < 0 || (token != 0 && s.tokens[i] != token) || s.lostNames[name] {
		return false
	}
	s.lostNames[name] = true
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reason != "" {
		return false
	}
	s.reason = reason
	close(s.lost)
	return true
}

func (s *holdState) isLost() bool { return len(s.lostNames) > 0 }

// kept is the names the server may still hold for this hold.
func (s *holdState) kept() []string {
	var out []string
	for _, n := range s.names {
		if !s.lostNames[n] {
			out = append(out, n)
		}
	}
	return out
}

func (s *holdState) state() *holdState { return s }

func indexOf(list []string, s string) int {
	for i, x := range list {
		if x == s {
			return i
		}
	}
	return -1
}

// Hold is a lock held: one name, or several taken together. Its fields do not change.
type Hold struct {
	Name   string   // the first name
	Token  uint64   // the fencing token of the first name
	Count  int      // the owner's reentrancy count of the first name, as granted
	Names  []string // every name, in request order
	Tokens []uint64 // their fencing tokens
	Counts []int    // their counts
	Shared bool     // held in shared mode
	Owner  string   // the owner sent: the one asked for, else one made for this hold alone
	holdState
}

// Unlock gives the hold back: every count of it when it has an owner of its own (no
// LockOptions.Owner), else one count. When the hold was lost meanwhile it returns an error
// matching ErrLost; when it was given back before, ErrNotHeld.
func (h *Hold) Unlock(ctx context.Context) error { return h.c.unlock(ctx, h) }

// Permits are permits of a semaphore, held. Its fields do not change.
type Permits struct {
	Name    string // the semaphore
	Token   uint64 // the fencing token of this owner's permits
	Permits int    // the permits this call took
	Held    int    // the permits the owner held in all after the grant
	Free    int    // the permits nobody held after the grant
	Owner   string // the owner sent
	holdState
}

// Release gives the permits back: all the owner's when it has an owner of its own (no
// AcquireOptions.Owner), else those this call took. Errors as for Hold.Unlock.
func (p *Permits) Release(ctx context.Context) error { return p.c.release(ctx, p) }
