// link.go - the connection under a session: TCP, unix or TLS, read as lines by one goroutine
// and written by another, so that the client's loop never blocks on the network.

package dlock

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"time"
)

const (
	replyMax     = 1 << 20          // longest line accepted from the server
	writeTimeout = 10 * time.Second // a write the server does not take by then breaks the link
)

// link is one connection to a dlockd. Its lines go to the client's loop; what the loop writes
// is queued and sent by the link's writer goroutine.
type link struct {
	addr address
	idx  int // index of addr in the client's list
	conn net.Conn
	rd   *bufio.Reader // the reader that read the HELLO reply: it may hold the next lines

	mu       sync.Mutex
	out      []byte        // queued for the writer
	shut     bool          // half-close once out is written
	wake     chan struct{} // tells the writer there is something to do
	done     chan struct{} // closed by close()
	doneOnce sync.Once

	// owned by the client's loop
	draining   bool      // half-closed to cancel waits: read to EOF, send nothing
	drainUntil time.Time // then it is closed anyway
}

// dial connects to a within timeout; conf for tls:// addresses.
func dial(ctx context.Context, a address, conf *tls.Config, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	d := &net.Dialer{}
	if !a.tls {
		return d.DialContext(ctx, a.network(), a.dialAddr())
	}
	td := &tls.Dialer{NetDialer: d, Config: conf}
	return td.DialContext(ctx, "tcp", a.dialAddr())
}

func newLink(a address, idx int, conn net.Conn, rd *bufio.Reader) *link {
	l := &link{addr: a, idx: idx, conn: conn, rd: rd, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go l.writer()
	return l
}

// write queues line (without its newline) to be sent.
func (l *link) write(line string) {
	l.mu.Lock()
	if !l.shut {
		l.out = append(l.out, line...)
		l.out = append(l.out, '\n')
	}
	l.mu.Unlock()
	l.poke()
}

// shutdown half-closes the connection once what is queued is sent: dlockd then answers what it
// read before, cancels what waits, and closes its side.
func (l *link) shutdown() {
	l.mu.Lock()
	l.shut = true
	l.mu.Unlock()
	l.poke()
}

func (l *link) poke() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// close closes the connection; the reader then ends.
func (l *link) close() {
	l.doneOnce.Do(func() {
		close(l.done)
		l.conn.Close()
	})
}

// closeLater closes the connection after d, unless the server closed it first.
func (l *link) closeLater(d time.Duration) {
	time.AfterFunc(d, l.close)
}

func (l *link) writer() {
	for {
		select {
		case <-l.done:
			return
		case <-l.wake:
		}
		l.mu.Lock()
		out, shut := l.out, l.shut
		l.out = nil
		l.mu.Unlock()
		if len(out) > 0 {
			_ = l.conn.SetWriteDeadline(time.Now().Add(writeTimeout))
			if _, err := l.conn.Write(out); err != nil {
				l.close()
				return
			}
		}
		if shut {
			if err := closeWrite(l.conn); err != nil {
				l.close()
			}
			return
		}
	}
}

// closeWrite half-closes conn: TLS sends its close_notify, then the TCP connection under it
// is half-closed too, so that a TLS-terminating proxy passes the EOF on either way.
func closeWrite(conn net.Conn) error {
	type halfCloser interface{ CloseWrite() error }
	if tc, ok := conn.(*tls.Conn); ok {
		if err := tc.CloseWrite(); err != nil {
			return err
		}
		conn = tc.NetConn()
	}
	if hc, ok := conn.(halfCloser); ok {
		return hc.CloseWrite()
	}
	return errors.New("cannot half-close")
}

// readLine reads one line (without "\r\n") of at most replyMax bytes.
func readLine(rd *bufio.Reader) (string, error) {
	var long []byte
	for {
		part, err := rd.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			if len(long)+len(part) > replyMax {
				return "", errors.New("reply line too long")
			}
			long = append(long, part...)
			continue
		}
		if err != nil {
			if err == io.EOF && len(long)+len(part) > 0 {
				err = io.ErrUnexpectedEOF
			}
			return "", err
		}
		if long != nil {
			part = append(long, part...)
		}
		n := len(part) - 1
		if n > 0 && part[n-1] == '\r' {
			n--
		}
		return string(part[:n]), nil
	}
}

// tlsConfig is the configuration for tls:// addresses: o.TLS (or a default) with the CA and
// the client certificate of o's files, else of $DLOCK_TLS_CA, $DLOCK_TLS_CERT, $DLOCK_TLS_KEY,
// where o.TLS does not set them itself.
func tlsConfig(o *Options) (*tls.Config, error) {
	conf := &tls.Config{MinVersion: tls.VersionTLS12}
	if o.TLS != nil {
		conf = o.TLS.Clone()
	}
	pick := func(v, env string) string {
		if v != "" {
			return v
		}
		return os.Getenv(env)
	}
	ca, cert, key := pick(o.TLSCA, "DLOCK_TLS_CA"), pick(o.TLSCert, "DLOCK_TLS_CERT"), pick(o.TLSKey, "DLOCK_TLS_KEY")
	if ca != "" && conf.RootCAs == nil {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, invalid("TLS CA: %v", err)
		}
		conf.RootCAs = x509.NewCertPool()
		if !conf.RootCAs.AppendCertsFromPEM(pem) {
			return nil, invalid("TLS CA: no certificate in %s", ca)
		}
	}
	if (cert != "" || key != "") && len(conf.Certificates) == 0 && conf.GetClientCertificate == nil {
		if key == "" {
			key = cert // one file with both
		}
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, invalid("TLS client certificate: %v", err)
		}
		conf.Certificates = []tls.Certificate{pair}
	}
	return conf, nil
}
