// errors.go - every error of the package is an *Error with a code; the sentinels match by code.

package dlock

import (
	"strings"
	"time"
)

// Codes of an *Error that are the library's own; the others are the protocol's ERR codes
// (SYNTAX, UNKNOWN, TOOBIG, NOAUTH, NOSESSION, NOTHELD, WRONGTYPE, MISMATCH, DEADLOCK, LIMIT,
// BACKEND).
const (
	CodeBusy    = "BUSY"    // not granted now, and the call did not wait
	CodeTimeout = "TIMEOUT" // waited, and was not granted: nothing is held
	CodeLost    = "LOST"    // the hold was lost before it was given back
	CodeConn    = "CONN"    // no connection, or no reply in time
	CodeClosed  = "CLOSED"  // the client is closed
	CodeInvalid = "INVALID" // a bad argument, refused before anything was sent
	CodeProto   = "PROTO"   // a reply the library does not understand
)

// Error is what every call returns on failure. Compare with errors.Is against the sentinels
// (ErrBusy, ErrTimeout, ErrLost, ErrNotHeld, ...), which match any *Error of their code, or
// look at Code after errors.As.
type Error struct {
	Code   string        // the protocol's ERR code, or one of the Code* constants above
	Text   string        // the server's message, or the library's
	Holder string        // BUSY of a lock: the client name of one holder ("-": no live session)
	TTL    time.Duration // BUSY of a lock: time left on that holder's lease
	Free   int           // BUSY of a semaphore: free permits
	Reason string        // LOST: lease, expired, backend, admin, jeopardy, moved

	sentinel bool  // one of the package's Err* values
	cause    error // what Unwrap gives: the context's error for a TIMEOUT of its deadline
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("dlock: ")
	b.WriteString(e.Code)
	if e.Text != "" {
		b.WriteString(" ")
		b.WriteString(e.Text)
	}
	return b.String()
}

// Is matches the sentinel of e's code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.sentinel && t.Code == e.Code
}

// Unwrap gives context.DeadlineExceeded for a TIMEOUT that the context's deadline set.
func (e *Error) Unwrap() error { return e.cause }

func sentinel(code string) *Error { return &Error{Code: code, sentinel: true} }

// Sentinels for errors.Is: each matches every *Error of its code.
var (
	ErrBusy      = sentinel(CodeBusy)
	ErrTimeout   = sentinel(CodeTimeout)
	ErrLost      = sentinel(CodeLost)
	ErrConn      = sentinel(CodeConn)
	ErrClosed    = sentinel(CodeClosed)
	ErrInvalid   = sentinel(CodeInvalid)
	ErrProto     = sentinel(CodeProto)
	ErrSyntax    = sentinel("SYNTAX")
	ErrNoAuth    = sentinel("NOAUTH")
	ErrNoSession = sentinel("NOSESSION")
	ErrNotHeld   = sentinel("NOTHELD")
	ErrWrongType = sentinel("WRONGTYPE")
	ErrMismatch  = sentinel("MISMATCH")
	ErrDeadlock  = sentinel("DEADLOCK")
	ErrLimit     = sentinel("LIMIT")
	ErrBackend   = sentinel("BACKEND")
)

func closedError() error { return &Error{Code: CodeClosed, Text: "the client is closed"} }

func lostError(reason string) error {
	return &Error{Code: CodeLost, Text: "the hold was lost (" + reason + ")", Reason: reason}
}
