// unit_test.go - the parts that need no server: reply lines, addresses, arguments, errors,
// and the time holds are trusted.

package dlock

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"
)

func TestParseReply(t *testing.T) {
	r := parseReply("#c7 OK token=17 count=2")
	if r.event || r.tag != "c7" || r.status != "OK" || r.fields["token"] != "17" || r.fields["count"] != "2" {
		t.Fatalf("%+v", r)
	}
	r = parseReply("* LOST jobs token=5 reason=admin")
	if !r.event || r.status != "LOST" || !reflect.DeepEqual(r.args, []string{"jobs"}) || r.fields["reason"] != "admin" {
		t.Fatalf("%+v", r)
	}
	r = parseReply("#x ERR NOTHELD 'a' is not held")
	if r.code != "NOTHELD" || r.text != "'a' is not held" {
		t.Fatalf("%+v", r)
	}
	r = parseReply(`#s OK {"name":"a b","type":null}`)
	if r.text != `{"name":"a b","type":null}` || len(r.fields) != 0 {
		t.Fatalf("%+v", r)
	}
	r = parseReply("OK tokens=1,2,3 counts=1,1,2")
	if v, err := r.numbers("token", 3); err != nil || !reflect.DeepEqual(v, []uint64{1, 2, 3}) {
		t.Fatalf("%v %v", v, err)
	}
	if _, err := r.numbers("token", 2); !errors.Is(err, ErrProto) {
		t.Fatalf("two of three tokens: %v", err)
	}
	if _, err := parseReply("OK token=-1").numbers("token", 1); !errors.Is(err, ErrProto) {
		t.Fatalf("negative token: %v", err)
	}
}

func TestParseAddress(t *testing.T) {
	good := map[string]address{
		"10.0.0.5:7412":      {text: "10.0.0.5:7412", host: "10.0.0.5", port: 7412},
		"db1":                {text: "db1", host: "db1", port: 7411},
		"[::1]:9":            {text: "[::1]:9", host: "::1", port: 9},
		"[::1]":              {text: "[::1]", host: "::1", port: 7411},
		"::1":                {text: "::1", host: "::1", port: 7411},
		"unix:/run/d.sock":   {text: "unix:/run/d.sock", path: "/run/d.sock"},
		"tls://example:7000": {text: "tls://example:7000", host: "example", port: 7000, tls: true},
	}
	for text, want := range good {
		if a, err := parseAddress(text); err != nil || a != want {
			t.Errorf("%s: %+v %v", text, a, err)
		}
	}
	for _, text := range []string{"unix:", "h:", "h:0", "h:65536", "h:+1", ":7411", "[::1", "[::1]x", "tls://"} {
		if _, err := parseAddress(text); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v", text, err)
		}
	}
	t.Setenv("DLOCK_ADDR", "")
	if a, err := parseAddresses(nil); err != nil || len(a) != 1 || a[0].text != "127.0.0.1:7411" {
		t.Fatalf("default: %+v %v", a, err)
	}
	t.Setenv("DLOCK_ADDR", "a:1, b:2")
	if a, err := parseAddresses([]string{" "}); err != nil || len(a) != 2 || a[1].host != "b" {
		t.Fatalf("from the environment: %+v %v", a, err)
	}
	if a, err := parseAddresses([]string{"x:1,y:2", "z"}); err != nil || len(a) != 3 || a[2].port != 7411 {
		t.Fatalf("list: %+v %v", a, err)
	}
}

func TestArguments(t *testing.T) {
	for _, name := range []string{"", "a b", "a=b", "}a", "é", string(make([]byte, 201))} {
		if checkName(name) == nil {
			t.Errorf("name %q accepted", name)
		}
	}
	if checkName("a}{b~!") != nil || checkValue("owner", "", true) != nil || checkValue("client name", "", false) == nil {
		t.Fatal("checks")
	}
	if checkWait(WaitForever) != nil || checkWait(0) != nil || checkWait(-1) == nil || checkWait(durationMax+time.Millisecond) == nil {
		t.Fatal("waits")
	}
	if millis(1500*time.Microsecond) != 2 || millis(2*time.Second) != 2000 {
		t.Fatal("millis")
	}
}

func TestErrorsMatch(t *testing.T) {
	e := &Error{Code: "NOTHELD", Text: "x"}
	if !errors.Is(e, ErrNotHeld) || errors.Is(e, ErrBusy) || e.Error() != "dlock: NOTHELD x" {
		t.Fatalf("%v", e)
	}
	var err error = &Error{Code: CodeTimeout, cause: context.DeadlineExceeded}
	if !errors.Is(err, ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatal("a TIMEOUT of the context's deadline")
	}
	if errors.Is(ErrBusy, &Error{Code: CodeBusy}) { // only the sentinels match by code
		t.Fatal("matched a non-sentinel")
	}
}

func TestTrust(t *testing.T) {
	for lease, want := range map[time.Duration]time.Duration{
		0:                      0,
		30 * time.Second:       17 * time.Second,        // 20 s less 3 s
		6 * time.Second:        3400 * time.Millisecond, // 4 s less 600 ms
		3 * time.Second:        1500 * time.Millisecond, // 2 s less 500 ms
		600 * time.Millisecond: 200 * time.Millisecond,  // 400 ms less half of it
	} {
		if got := trustOf(lease); got != want {
			t.Errorf("lease %v: trust %v, want %v", lease, got, want)
		}
	}
}

func TestDialRefusesBadOptions(t *testing.T) {
	ctx := context.Background()
	for _, o := range []*Options{{Name: "a b"}, {TTL: -time.Second}, {Password: "x y"}} {
		if _, err := Dial(ctx, []string{"127.0.0.1:1"}, o); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: %v", o, err)
		}
	}
	if _, err := Dial(ctx, []string{"tls://127.0.0.1:1"}, &Options{TLSCA: "/nonexistent"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("missing CA: %v", err)
	}
}
