// Package workload is the testbed's built-in pod workload: a small server
// that the kubelet stand-in runs for every container, whatever its image.
//
// Over TCP it speaks HTTP and answers every request with one line naming the
// pod and the client address it saw:
//
//	pod=web-5d4f-abcde client=10.244.1.1:53124
//
// Over UDP it echoes each datagram, prefixed the same way:
//
//	pod=web-5d4f-abcde client=10.244.1.1:41000 <the datagram>
//
// The path /readyz answers 200 while the server is ready and 503 after a
// POST to /readyz/fail (POST /readyz/ok makes it ready again), so tests can
// drive a readiness probe.
package workload

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultPort is where the server listens (TCP) when the pod declares no
// containerPort.
const DefaultPort = 8080

// Config configures Serve.
type Config struct {
	// Pod is the name the server reports.
	Pod string
	// TCP and UDP are the ports to listen on, on every address.
	TCP, UDP []int
	// Log receives one line per request; nil discards.
	Log io.Writer
}

// Reply is the line the server sends for a request from client.
func Reply(pod, client string) string { return "pod=" + pod + " client=" + client }

// ParseReply splits a server reply into the pod name, the client address and
// the rest (the echoed datagram for UDP).
func ParseReply(s string) (pod, client, rest string, err error) {
	s = strings.TrimRight(s, "\n")
	f := strings.SplitN(s, " ", 3)
	if len(f) < 2 || !strings.HasPrefix(f[0], "pod=") || !strings.HasPrefix(f[1], "client=") {
		return "", "", "", fmt.Errorf("workload: reply %q is not \"pod=NAME client=ADDR ...\"", s)
	}
	if len(f) == 3 {
		rest = f[2]
	}
	return strings.TrimPrefix(f[0], "pod="), strings.TrimPrefix(f[1], "client="), rest, nil
}

// Serve listens on every configured port and serves until ctx ends.
func Serve(ctx context.Context, cfg Config) error {
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	if len(cfg.TCP) == 0 && len(cfg.UDP) == 0 {
		cfg.TCP = []int{DefaultPort}
	}
	var (
		ready atomic.Bool
		logMu sync.Mutex
	)
	ready.Store(true)
	logf := func(format string, a ...any) {
		logMu.Lock()
		defer logMu.Unlock()
		fmt.Fprintf(cfg.Log, time.Now().Format(time.RFC3339Nano)+" "+format+"\n", a...)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if !ready.Load() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, Reply(cfg.Pod, r.RemoteAddr))
	})
	mux.HandleFunc("POST /readyz/fail", func(w http.ResponseWriter, r *http.Request) { ready.Store(false) })
	mux.HandleFunc("POST /readyz/ok", func(w http.ResponseWriter, r *http.Request) { ready.Store(true) })
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		logf("tcp %s %s %s", r.RemoteAddr, r.Method, r.URL.Path)
		fmt.Fprintln(w, Reply(cfg.Pod, r.RemoteAddr))
	})

	var closers []io.Closer
	errc := make(chan error, len(cfg.TCP)+len(cfg.UDP))
	for _, p := range cfg.TCP {
		l, err := net.Listen("tcp", ":"+strconv.Itoa(p))
		if err != nil {
			closeAll(closers)
			return fmt.Errorf("workload: listen tcp %d: %w", p, err)
		}
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		closers = append(closers, srv)
		go func() { errc <- srv.Serve(l) }()
	}
	for _, p := range cfg.UDP {
		pc, err := net.ListenPacket("udp", ":"+strconv.Itoa(p))
		if err != nil {
			closeAll(closers)
			return fmt.Errorf("workload: listen udp %d: %w", p, err)
		}
		closers = append(closers, pc)
		go func() { errc <- echo(pc, cfg.Pod, logf) }()
	}
	logf("serving pod %s tcp %v udp %v", cfg.Pod, cfg.TCP, cfg.UDP)
	select {
	case <-ctx.Done():
		closeAll(closers)
		return nil
	case err := <-errc:
		closeAll(closers)
		return fmt.Errorf("workload: %w", err)
	}
}

func echo(pc net.PacketConn, pod string, logf func(string, ...any)) error {
	buf := make([]byte, 65536)
	for {
		n, addr, err := pc.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		logf("udp %s %d bytes", addr, n)
		reply := append([]byte(Reply(pod, addr.String())+" "), buf[:n]...)
		if _, err := pc.WriteTo(reply, addr); err != nil {
			logf("udp %s: reply: %v", addr, err)
		}
	}
}

func closeAll(cs []io.Closer) {
	for _, c := range cs {
		_ = c.Close()
	}
}
