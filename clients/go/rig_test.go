// rig_test.go - real processes for the tests: a redis-server and dlockd daemons on free
// loopback ports, logging into a temporary directory that is removed unless a test failed
// (or $DLOCK_KEEP is set). $DLOCKD names the daemon (default: the build's daemon/dlockd),
// $REDIS_SERVER redis-server.

package dlock

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

const adminPass = "rig-admin-pass"

var (
	dlockdPath string
	redisPath  string
	rigDir     string
	rigMu      sync.Mutex
	rigProcs   []*proc
)

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	dlockdPath = os.Getenv("DLOCKD")
	if dlockdPath == "" {
		dlockdPath, _ = filepath.Abs(filepath.Join("..", "..", "daemon", "dlockd"))
	}
	if _, err := os.Stat(dlockdPath); err != nil {
		fmt.Fprintf(os.Stderr, "no dlockd at %s: build it first, or set $DLOCKD\n", dlockdPath)
		return 1
	}
	redisPath = os.Getenv("REDIS_SERVER")
	if redisPath == "" {
		redisPath = "redis-server"
	}
	var err error
	if rigDir, err = os.MkdirTemp("", "dlock-go."); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := m.Run()
	rigMu.Lock()
	for _, p := range rigProcs {
		p.signal(syscall.SIGKILL)
	}
	rigMu.Unlock()
	if code != 0 || os.Getenv("DLOCK_KEEP") != "" {
		fmt.Fprintf(os.Stderr, "logs kept in %s\n", rigDir)
	} else {
		os.RemoveAll(rigDir)
	}
	return code
}

// proc is a process of the rig listening on port.
type proc struct {
	cmd  *exec.Cmd
	port int
	addr string
	log  string
}

func (p *proc) signal(sig os.Signal) {
	if p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(sig)
	}
}

// kill stops p at once and waits for it to be gone.
func (p *proc) kill() {
	p.signal(syscall.SIGKILL)
	_ = p.cmd.Wait()
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// spawn starts argv logging to log in the rig's directory.
func spawn(t *testing.T, log string, port int, argv ...string) *proc {
	t.Helper()
	path := filepath.Join(rigDir, log)
	out, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, port: port, addr: "127.0.0.1:" + strconv.Itoa(port), log: path}
	rigMu.Lock()
	rigProcs = append(rigProcs, p)
	rigMu.Unlock()
	return p
}

// startRedis starts a redis-server without persistence.
func startRedis(t *testing.T) *proc {
	t.Helper()
	port := freePort(t)
	p := spawn(t, fmt.Sprintf("redis-%d.log", port), port, redisPath, "--port", strconv.Itoa(port),
		"--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", rigDir)
	waitFor(t, "redis-server", 15*time.Second, func() bool { return probe(port, "PING\r\n", "+PONG") })
	return p
}

// startDlockd starts a dlockd on redis with extra --key value arguments.
func startDlockd(t *testing.T, redis *proc, args ...string) *proc {
	t.Helper()
	port := freePort(t)
	argv := append([]string{dlockdPath, "--listen", "127.0.0.1:" + strconv.Itoa(port), "--redis", redis.addr,
		"--adminpass", adminPass, "--log-level", "debug"}, args...)
	p := spawn(t, fmt.Sprintf("dlockd-%d.log", port), port, argv...)
	waitFor(t, "dlockd on "+p.addr, 15*time.Second, func() bool { return probe(port, "PING\n", "OK") })
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("dlockd log: %s", p.log)
		}
	})
	return p
}

// probe sends line to port and says whether the answer starts with want.
func probe(port int, line, want string) bool {
	conn, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), time.Second)
	if err != nil {
		return false
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := conn.Write([]byte(line)); err != nil {
		return false
	}
	got, err := bufio.NewReader(conn).ReadString('\n')
	return err == nil && strings.HasPrefix(got, want)
}

// waitFor polls ok until it is true, or fails the test after d.
func waitFor(t *testing.T, what string, d time.Duration, ok func() bool) {
	t.Helper()
	end := time.Now().Add(d)
	for !ok() {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

var (
	sharedOnce   sync.Once
	sharedRedis  *proc
	sharedDaemon *proc
	sharedSock   string
)

// shared is the redis-server and the dlockd (lock-lease 6s, also on a unix socket) that tests
// share; each test uses names of its own.
func shared(t *testing.T) (*proc, *proc) {
	t.Helper()
	sharedOnce.Do(func() {
		sharedRedis = startRedis(t)
		sharedSock = filepath.Join(rigDir, "dlockd.sock")
		sharedDaemon = startDlockd(t, sharedRedis, "--lock-lease", "6s", "--listen", "unix:"+sharedSock)
	})
	if sharedDaemon == nil {
		t.Fatal("the shared daemon did not start")
	}
	return sharedRedis, sharedDaemon
}

// testCtx is a context for one test, ended when it ends.
func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// dialT dials addrs and closes the client when the test ends.
func dialT(t *testing.T, addrs []string, o *Options) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	c, err := Dial(ctx, addrs, o)
	if err != nil {
		t.Fatalf("Dial %v: %v", addrs, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// events collects a client's events for the test to wait for.
type events struct {
	mu   sync.Mutex
	all  []Event
	wake chan struct{}
}

func newEvents() *events { return &events{wake: make(chan struct{}, 1)} }

func (e *events) add(ev Event) {
	e.mu.Lock()
	e.all = append(e.all, ev)
	e.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// wait waits up to d for an event that ok accepts, and returns it.
func (e *events) wait(t *testing.T, what string, d time.Duration, ok func(Event) bool) Event {
	t.Helper()
	end := time.After(d)
	for {
		e.mu.Lock()
		for _, ev := range e.all {
			if ok(ev) {
				e.mu.Unlock()
				return ev
			}
		}
		e.mu.Unlock()
		select {
		case <-e.wake:
		case <-end:
			t.Fatalf("no %s event in %v: %+v", what, d, e.list())
		}
	}
}

func (e *events) list() []Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]Event(nil), e.all...)
}

// admin sends line on a connection authenticated as the operator; it returns the reply.
func admin(t *testing.T, p *proc, line string) string {
	t.Helper()
	conn, err := net.DialTimeout("tcp", p.addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	rd := bufio.NewReader(conn)
	ask := func(l string) string {
		if _, err := conn.Write([]byte(l + "\n")); err != nil {
			t.Fatal(err)
		}
		for {
			got, err := readLine(rd)
			if err != nil {
				t.Fatalf("%s: %v", l, err)
			}
			if !strings.HasPrefix(got, "*") {
				return got
			}
		}
	}
	if got := ask("AUTH " + adminPass); got != "OK" {
		t.Fatalf("AUTH: %s", got)
	}
	return ask(line)
}

// waiters is the number of requests queued for name.
func waiters(t *testing.T, c *Client, name string) int {
	t.Helper()
	st, err := c.Status(testCtx(t, 10*time.Second), name)
	if err != nil {
		t.Fatalf("STATUS %s: %v", name, err)
	}
	return st.Waiters
}

// mustBe fails the test unless errors.Is(err, target).
func mustBe(t *testing.T, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("error %v, want %v", err, target)
	}
}

// relay passes the bytes of its clients on to a dlockd, an end of input (EOF, or TLS's
// close_notify) as a half-close. With a TLS configuration it terminates TLS and notes the
// common name of each client certificate.
type relay struct {
	ln     net.Listener
	addr   string      // tls://HOST:PORT or HOST:PORT
	refuse atomic.Bool // close new connections at once
	mu     sync.Mutex
	peers  []string   // common names of the client certificates, one per connection
	conns  []net.Conn // open client connections
}

func startRelay(t *testing.T, target string, conf *tls.Config) *relay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &relay{ln: ln, addr: ln.Addr().String()}
	if conf != nil {
		r.ln, r.addr = tls.NewListener(ln, conf), "tls://"+r.addr
	}
	t.Cleanup(func() { r.ln.Close(); r.breakAll() })
	go func() {
		for {
			conn, err := r.ln.Accept()
			if err != nil {
				return
			}
			go r.serve(conn, target)
		}
	}()
	return r
}

func (r *relay) serve(in net.Conn, target string) {
	defer in.Close()
	if r.refuse.Load() {
		return
	}
	peer := ""
	if tc, ok := in.(*tls.Conn); ok {
		_ = in.SetDeadline(time.Now().Add(5 * time.Second))
		if err := tc.Handshake(); err != nil {
			return
		}
		_ = in.SetDeadline(time.Time{})
		peer = tc.ConnectionState().PeerCertificates[0].Subject.CommonName
	}
	up, err := net.Dial("tcp", target)
	if err != nil {
		return
	}
	defer up.Close()
	r.mu.Lock()
	r.peers = append(r.peers, peer)
	r.conns = append(r.conns, in)
	r.mu.Unlock()
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(up, in)
		_ = up.(*net.TCPConn).CloseWrite()
		close(done)
	}()
	_, _ = io.Copy(in, up)
	_ = closeWrite(in)
	<-done
}

// breakAll cuts every connection through the relay.
func (r *relay) breakAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.conns {
		c.Close()
	}
	r.conns = nil
}

func (r *relay) peerList() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.peers...)
}
