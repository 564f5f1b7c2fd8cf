// address.go - dlockd addresses in DLOCK_ADDR syntax, as libdlock reads them.

package dlock

import (
	"net"
	"os"
	"strconv"
	"strings"
)

const defaultPort = 7411

// address is one place a dlockd may answer: TCP (maybe TLS) or a unix socket.
type address struct {
	text string // as given, for messages and events
	host string // TCP: host name or IP address
	port int    // TCP: port
	path string // unix socket: its path
	tls  bool   // tls://HOST:PORT
}

func (a address) network() string {
	if a.path != "" {
		return "unix"
	}
	return "tcp"
}

func (a address) dialAddr() string {
	if a.path != "" {
		return a.path
	}
	return net.JoinHostPort(a.host, strconv.Itoa(a.port))
}

// parseAddress reads HOST:PORT, HOST, [IPV6]:PORT, [IPV6] or unix:PATH, any of the TCP forms
// after tls://. The port defaults to 7411.
func parseAddress(text string) (address, error) {
	bad := invalid("bad address %q", text)
	if strings.HasPrefix(text, "unix:") {
		if len(text) == len("unix:") {
			return address{}, bad
		}
		return address{text: text, path: text[len("unix:"):]}, nil
	}
	a := address{text: text, port: defaultPort}
	rest := text
	if strings.HasPrefix(rest, "tls://") {
		a.tls, rest = true, rest[len("tls://"):]
	}
	host, port := rest, ""
	if strings.HasPrefix(rest, "[") {
		end := strings.IndexByte(rest, ']')
		if end < 0 {
			return address{}, bad
		}
		host, port = rest[1:end], rest[end+1:]
		if port != "" && !strings.HasPrefix(port, ":") {
			return address{}, bad
		}
		port = strings.TrimPrefix(port, ":")
		if port == "" && strings.HasSuffix(rest, ":") {
			return address{}, bad
		}
	} else if strings.Count(rest, ":") == 1 { // a bare IPv6 address has several colons, and no port
		i := strings.IndexByte(rest, ':')
		host, port = rest[:i], rest[i+1:]
		if port == "" {
			return address{}, bad
		}
	}
	if host == "" {
		return address{}, bad
	}
	if port != "" {
		p, err := strconv.Atoi(port)
		if err != nil || p < 1 || p > 65535 || len(port) > 5 || port[0] == '+' {
			return address{}, bad
		}
		a.port = p
	}
	a.host = host
	return a, nil
}

// parseAddresses reads the addresses of list, each item one or several separated by commas or
// blanks. Without any, $DLOCK_ADDR, else 127.0.0.1:7411.
func parseAddresses(list []string) ([]address, error) {
	texts := fields(list)
	if len(texts) == 0 {
		texts = fields([]string{os.Getenv("DLOCK_ADDR")})
	}
	if len(texts) == 0 {
		texts = []string{"127.0.0.1:" + strconv.Itoa(defaultPort)}
	}
	addrs := make([]address, 0, len(texts))
	for _, text := range texts {
		a, err := parseAddress(text)
		if err != nil {
			return nil, err
		}
		addrs = append(addrs, a)
	}
	return addrs, nil
}

// fields splits every item of list at commas and blanks.
func fields(list []string) []string {
	var out []string
	for _, item := range list {
		out = append(out, strings.FieldsFunc(item, func(r rune) bool {
			return r == ',' || r == ' ' || r == '\t' || r == '\n'
		})...)
	}
	return out
}
