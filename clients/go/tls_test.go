// tls_test.go - tls:// addresses, through a TLS-terminating relay (written here with
// crypto/tls) in front of a real dlockd: certificates made with the openssl command and taken
// from $DLOCK_TLS_*; a client certificate is required; a reconnect goes through TLS again and
// resumes the session; a cancelled wait half-closes through TLS as well.

package dlock

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// makeCertificates writes into dir a CA and another CA, and certificates the first signs: the
// relay's (for 127.0.0.1) and the client's.
func makeCertificates(t *testing.T, dir string) {
	t.Helper()
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Fatal("openssl is needed to make the certificates of the TLS test")
	}
	openssl := func(args ...string) {
		cmd := exec.Command("openssl", args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("openssl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	key := []string{"-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"}
	for _, ca := range []string{"ca", "other-ca"} {
		openssl(append(append([]string{"req", "-x509"}, key...), "-keyout", ca+".key", "-out", ca+".crt",
			"-days", "2", "-subj", "/CN="+ca)...)
	}
	for name, ext := range map[string]string{
		"server": "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
		"client": "extendedKeyUsage=clientAuth\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name+".ext"), []byte(ext), 0o600); err != nil {
			t.Fatal(err)
		}
		openssl(append(append([]string{"req"}, key...), "-keyout", name+".key", "-out", name+".csr",
			"-subj", "/CN=dlock-"+name)...)
		openssl("x509", "-req", "-in", name+".csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
			"-out", name+".crt", "-days", "2", "-extfile", name+".ext")
	}
}

// relayTLS is the relay's TLS configuration: its certificate, signed by the CA, for
// 127.0.0.1, and a client certificate of that CA required.
func relayTLS(t *testing.T, dir string) *tls.Config {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key"))
	if err != nil {
		t.Fatal(err)
	}
	pem, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	return &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert}
}

func TestTLSThroughRelay(t *testing.T) {
	ctx := testCtx(t, 60*time.Second)
	dir := t.TempDir()
	makeCertificates(t, dir)
	_, d := shared(t)
	r := startRelay(t, d.addr, relayTLS(t, dir))
	t.Setenv("DLOCK_ADDR", r.addr)
	t.Setenv("DLOCK_TLS_CA", filepath.Join(dir, "ca.crt"))
	t.Setenv("DLOCK_TLS_CERT", filepath.Join(dir, "client.crt"))
	t.Setenv("DLOCK_TLS_KEY", filepath.Join(dir, "client.key"))
	ev := newEvents()
	c := dialT(t, nil, &Options{Name: "tls-client", OnEvent: ev.add})
	h, err := c.Lock(ctx, "over-tls", LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	plain := dialT(t, []string{d.addr}, &Options{Name: "plain"})
	st, err := plain.Status(ctx, "over-tls")
	if err != nil || len(st.Holders) != 1 || st.Holders[0].Client != "tls-client" || st.Holders[0].Token != h.Token {
		t.Fatalf("status %+v %v", st, err)
	}
	if p := r.peerList(); len(p) != 1 || p[0] != "dlock-client" {
		t.Fatalf("peers %v", p)
	}

	// A broken link: the client comes back through TLS, resumes, sends its wait again.
	sid := c.Session()
	blocker, err := plain.Lock(ctx, "queued", LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *Hold, 1)
	go func() {
		h, err := c.Lock(ctx, "queued", LockOptions{Wait: time.Minute})
		if err != nil {
			t.Error(err)
		}
		got <- h
	}()
	waitFor(t, "queued", 10*time.Second, func() bool { return waiters(t, plain, "queued") == 1 })
	r.breakAll()
	ev.wait(t, "resumed connect", 20*time.Second, func(e Event) bool { return e.Kind == EventConnect && e.Resumed })
	if c.Session() != sid || len(r.peerList()) != 2 {
		t.Fatalf("session %s then %s; peers %v", sid, c.Session(), r.peerList())
	}
	if err := blocker.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	w := <-got
	st, _ = plain.Status(ctx, "queued")
	if w == nil || len(st.Holders) != 1 || st.Holders[0].Session != sid || st.Holders[0].Count != 1 || st.Waiters != 0 {
		t.Fatalf("waiter %+v, status %+v", w, st)
	}
	_ = w.Unlock(ctx)

	// A cancelled wait: the half-close passes through TLS and the relay.
	blocker, err = plain.Lock(ctx, "tls-cancel", LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := c.Lock(cctx, "tls-cancel", LockOptions{Wait: WaitForever})
		done <- err
	}()
	waitFor(t, "queued", 10*time.Second, func() bool { return waiters(t, plain, "tls-cancel") == 1 })
	cancel()
	mustBe(t, <-done, context.Canceled)
	waitFor(t, "the wait gone", 10*time.Second, func() bool { return waiters(t, plain, "tls-cancel") == 0 })
	_ = blocker.Unlock(ctx)
	if err := h.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if st, _ := c.Status(ctx, "over-tls"); st.Type != "" || c.Session() != sid {
		t.Fatalf("status %+v, session %s", st, c.Session())
	}
	c.Close()

	// No client certificate, or a relay the CA did not sign: no connection.
	n := len(r.peerList())
	os.Unsetenv("DLOCK_TLS_CERT")
	os.Unsetenv("DLOCK_TLS_KEY")
	_, err = Dial(ctx, []string{r.addr}, &Options{ConnectTimeout: 3 * time.Second})
	mustBe(t, err, ErrConn)
	_, err = Dial(ctx, []string{r.addr}, &Options{ConnectTimeout: 3 * time.Second, TLSCA: filepath.Join(dir, "other-ca.crt"),
		TLSCert: filepath.Join(dir, "client.crt"), TLSKey: filepath.Join(dir, "client.key")})
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeConn || !strings.Contains(e.Text, "certificate") {
		t.Fatalf("wrong CA: %v", err)
	}
	if len(r.peerList()) != n {
		t.Fatalf("a connection got through: %v", r.peerList())
	}
}
