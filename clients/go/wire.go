// wire.go - the protocol's lines: reading replies and events, checking what goes into requests.

package dlock

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

const (
	lineMax     = 4096                                            // the server's default max-line, terminator included
	durationMax = time.Duration(math.MaxInt32) * time.Millisecond // the longest duration the protocol takes
	valueMax    = 200                                             // bytes of a name, an owner, a client name
)

// WaitForever, as LockOptions.Wait, AcquireOptions.Wait or Await's wait, waits without limit
// (the protocol's wait=inf); a deadline of the call's context still bounds it.
const WaitForever = time.Duration(math.MaxInt64)

// reply is one line from dlockd: `* LOST x token=1` is {event: true, status: "LOST",
// args: ["x"], fields: {token: "1"}}; `#c1 ERR NOTHELD ...` has tag "c1", code "NOTHELD" and
// the message in text; `OK {...}` keeps the JSON in text.
type reply struct {
	event  bool              // a line starting with '*'
	tag    string            // without its '#'
	status string            // OK, BUSY, TIMEOUT, ERR, or the event's word
	code   string            // ERR's code
	text   string            // ERR's message, or the JSON object after OK
	args   []string          // bare words after the status
	fields map[string]string // key=value words after the status
}

func parseReply(line string) *reply {
	r := &reply{fields: map[string]string{}}
	rest := line
	if strings.HasPrefix(rest, "*") {
		r.event = true
		rest = strings.TrimLeft(rest[1:], " ")
	} else if strings.HasPrefix(rest, "#") {
		sp := strings.IndexByte(rest, ' ')
		if sp < 0 {
			r.tag, rest = rest[1:], ""
		} else {
			r.tag, rest = rest[1:sp], rest[sp+1:]
		}
	}
	words := strings.Split(rest, " ")
	r.status, words = words[0], words[1:]
	switch {
	case r.status == "ERR":
		if len(words) > 0 {
			r.code, r.text = words[0], strings.Join(words[1:], " ")
		}
	case len(words) > 0 && strings.HasPrefix(words[0], "{"):
		r.text = strings.Join(words, " ")
	default:
		for _, w := range words {
			if eq := strings.IndexByte(w, '='); eq > 0 {
				r.fields[w[:eq]] = w[eq+1:]
			} else if w != "" {
				r.args = append(r.args, w)
			}
		}
	}
	return r
}

// numbers returns the n numbers of key= (one name) or keys= (several names) of r.
func (r *reply) numbers(key string, n int) ([]uint64, error) {
	s, ok := r.fields[key]
	if n > 1 {
		s, ok = r.fields[key+"s"]
	}
	parts := strings.Split(s, ",")
	if !ok || len(parts) != n {
		return nil, protoError("bad %s= in reply", key)
	}
	v := make([]uint64, n)
	for i, p := range parts {
		x, err := strconv.ParseUint(p, 10, 63)
		if err != nil {
			return nil, protoError("bad %s= in reply", key)
		}
		v[i] = x
	}
	return v, nil
}

// number returns the one number of key= in r.
func (r *reply) number(key string) (int, error) {
	v, err := r.numbers(key, 1)
	if err != nil {
		return 0, err
	}
	return int(v[0]), nil
}

// printable says whether s is 0x21-0x7E only.
func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// checkName: a name of a lock, semaphore or latch is 1-200 printable bytes without '=', and
// does not start with '}'.
func checkName(name string) error {
	if len(name) < 1 || len(name) > valueMax || !printable(name) || strings.ContainsRune(name, '=') ||
		name[0] == '}' {
		return invalid("bad name %q", name)
	}
	return nil
}

// checkValue: an owner or a client name is up to 200 printable bytes (an owner may be empty).
func checkValue(what, v string, empty bool) error {
	if len(v) > valueMax || !printable(v) || (v == "" && !empty) {
		return invalid("bad %s %q", what, v)
	}
	return nil
}

// checkCount: a count, a limit or a number of permits is an integer from min to 2^31-1.
func checkCount(what string, n, min int) error {
	if n < min || int64(n) > math.MaxInt32 {
		return invalid("bad %s %d", what, n)
	}
	return nil
}

// millis is d in whole milliseconds, rounded up.
func millis(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// checkDuration: a lease or a ttl is 1 ms to 2^31-1 ms.
func checkDuration(what string, d time.Duration) error {
	if d <= 0 || d > durationMax {
		return invalid("bad %s %v", what, d)
	}
	return nil
}

// checkWait: a wait is 0, up to 2^31-1 ms, or WaitForever.
func checkWait(d time.Duration) error {
	if d < 0 || (d > durationMax && d != WaitForever) {
		return invalid("bad wait %v", d)
	}
	return nil
}

func protoError(format string, a ...interface{}) error {
	return &Error{Code: CodeProto, Text: fmt.Sprintf(format, a...)}
}

func invalid(format string, a ...interface{}) error {
	return &Error{Code: CodeInvalid, Text: fmt.Sprintf(format, a...)}
}
