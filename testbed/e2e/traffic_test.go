package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"nodeflow/testbed"
	"nodeflow/testbed/nsutil"
	"nodeflow/testbed/workload"
)

// serviceTraffic asks a Service from client pods without a pause, to
// show that something done meanwhile (an agent replaced, upgraded, run
// from its image) loses nothing: from each client, a new TCP connection
// to each of the Service's ClusterIPs every 20 ms, a UDP echo every 50 ms,
// and one HTTP keep-alive connection per client and family asked every
// 50 ms, which should stay the same connection throughout (its conntrack
// entries carry over; finish logs it when it did not).
type serviceTraffic struct {
	stop  chan struct{}
	wg    sync.WaitGroup
	mu    sync.Mutex
	ok    map[string]int
	fails map[string][]string
	// dials counts the keep-alive connections' dials by name; redials
	// holds when each dial after the first happened, and why.
	dials   map[string]*atomic.Int64
	redials []string
	// names are every stream's, so that settle waits for the streams that
	// have not answered yet too.
	names []string
	// failedAt are the failures' times; drops, when set (watchNodes),
	// explains them.
	failedAt []time.Time
	drops    *dropWatch
}

// watchNodes makes finish report, when a request failed, what the nodes'
// datapaths dropped and logged around the failures.
func (s *serviceTraffic) watchNodes(nodes []*testbed.Member) { s.drops = watchDrops(nodes) }

// serviceUnderTraffic deploys web pods on both nodes and a client pod on
// each, puts a dual-stack Service (webPorts) in front of the web pods, and
// waits until every client reaches every web pod through it, on its TCP
// and its UDP port (the pods' readiness says nothing of their UDP server).
func serviceUnderTraffic(t *testing.T, e *env, ns string) (clients []netPod, vips []netip.Addr) {
	t.Helper()
	web := deployPods(t, e, ns, "web", 2)
	clients = deployPods(t, e, ns, "client", 2)
	svc := createService(t, e, ns, newService("web", v1.ServiceSpec{
		Selector:       map[string]string{"app": "web"},
		IPFamilyPolicy: ptr.To(v1.IPFamilyPolicyRequireDualStack),
		Ports:          webPorts,
	}))
	vips = svcAddrs(t, svc)
	backends := map[string]bool{}
	for _, p := range web {
		backends[p.name] = true
	}
	for _, c := range clients {
		for _, vip := range vips {
			reach(t, c.node+" to "+vip.String(), c.netns, false, vip, 80, backends, netip.Addr{})
			reach(t, c.node+" to "+vip.String()+" over UDP", c.netns, true, vip, 53, backends, netip.Addr{})
		}
	}
	return clients, vips
}

// startServiceTraffic starts the traffic from clients to vips.
func startServiceTraffic(t *testing.T, clients []netPod, vips []netip.Addr) *serviceTraffic {
	t.Helper()
	s := &serviceTraffic{stop: make(chan struct{}), ok: map[string]int{}, fails: map[string][]string{}, dials: map[string]*atomic.Int64{}}
	every := func(d time.Duration, name string, ask func(ctx context.Context) error) {
		s.names = append(s.names, name)
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			tick := time.NewTicker(d)
			defer tick.Stop()
			for {
				select {
				case <-s.stop:
					return
				case <-tick.C:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				err := ask(ctx)
				cancel()
				s.mu.Lock()
				if err != nil {
					now := time.Now()
					s.fails[name] = append(s.fails[name], fmt.Sprintf("%s: %v", now.Format("15:04:05.000"), err))
					s.failedAt = append(s.failedAt, now)
				} else {
					s.ok[name]++
				}
				s.mu.Unlock()
			}
		}()
	}
	for _, c := range clients {
		for _, vip := range vips {
			every(20*time.Millisecond, fmt.Sprintf("%s tcp %s", c.node, vip), func(ctx context.Context) error {
				_, _, err := httpGet(ctx, c.netns, vip, 80)
				return err
			})
			every(50*time.Millisecond, fmt.Sprintf("%s udp %s", c.node, vip), func(ctx context.Context) error {
				_, _, err := udpEcho(ctx, c.netns, vip, 53)
				return err
			})
			name := fmt.Sprintf("%s keep-alive %s", c.node, vip)
			dials := &atomic.Int64{}
			s.dials[name] = dials
			var lastErr atomic.Value
			tr := &http.Transport{MaxConnsPerHost: 1, IdleConnTimeout: time.Hour, DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				if dials.Add(1) > 1 {
					s.mu.Lock()
					s.redials = append(s.redials, fmt.Sprintf("%s: %s dialled again (last error %v)", time.Now().Format("15:04:05.000"), name, lastErr.Load()))
					s.mu.Unlock()
				}
				return nsutil.Dial(ctx, c.netns, network, addr, 3*time.Second)
			}}
			t.Cleanup(tr.CloseIdleConnections)
			hc := &http.Client{Transport: tr, Timeout: 3 * time.Second}
			url := "http://" + net.JoinHostPort(vip.String(), strconv.Itoa(80)) + "/"
			every(50*time.Millisecond, name, func(ctx context.Context) error {
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
				if err != nil {
					return err
				}
				trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
					if !i.Reused && dials.Load() > 1 {
						lastErr.Store(fmt.Sprintf("a new connection for the request at %s", time.Now().Format("15:04:05.000")))
					}
				}}
				resp, err := hc.Do(req.WithContext(httptrace.WithClientTrace(ctx, trace)))
				if err != nil {
					lastErr.Store(err.Error())
					return err
				}
				defer resp.Body.Close()
				b, err := io.ReadAll(resp.Body)
				if err != nil {
					return err
				}
				_, _, _, err = workload.ParseReply(string(b))
				return err
			})
		}
	}
	return s
}

// settle waits until every stream has been answered a few more times
// (or failed): what was just done is then proven on live traffic, not
// only on the moment it finished.
func (s *serviceTraffic) settle(t *testing.T, what string) {
	t.Helper()
	s.mu.Lock()
	base := map[string]int{}
	for _, name := range s.names {
		base[name] = s.ok[name] + len(s.fails[name])
	}
	s.mu.Unlock()
	eventually(t, 30*time.Second, "traffic after "+what, func(context.Context) error {
		s.mu.Lock()
		defer s.mu.Unlock()
		for name, n := range base {
			if got := s.ok[name] + len(s.fails[name]); got < n+5 {
				return fmt.Errorf("%s: %d more requests, want 5", name, got-n)
			}
		}
		return nil
	})
}

// finish stops the traffic and fails t if anything was lost: a failed
// request or a stream that never answered. A keep-alive connection that
// had to be dialled again is logged with when and why.
func (s *serviceTraffic) finish(t *testing.T, what string) {
	t.Helper()
	close(s.stop)
	s.wg.Wait()
	total := 0
	for name, n := range s.ok {
		total += n
		if n == 0 {
			t.Errorf("%s: %s: no answer at all", what, name)
		}
	}
	for name, f := range s.fails {
		shown := f
		if len(shown) > 3 {
			shown = shown[:3]
		}
		t.Errorf("%s: %s: %d of %d failed, first %q", what, name, len(f), len(f)+s.ok[name], shown)
	}
	for name, d := range s.dials {
		switch n := d.Load(); {
		case n == 0:
			t.Errorf("%s: %s: never connected", what, name)
		case n > 1:
			// Seen once in a full e2e run (an IPv6 kept-alive connection
			// through the Service, during an agent's replacement), never
			// alone: open. The request itself did not fail (the client
			// retried it on a new connection); the times say when.
			t.Logf("%s: %s: the connection was dialled %d times (cut and made again): open, see the times below", what, name, n)
		}
	}
	for _, r := range s.redials {
		t.Log(r)
	}
	t.Logf("%s: %d requests answered in %d streams, %d failed", what, total, len(s.ok), len(s.fails))
	if len(s.failedAt) > 0 && s.drops != nil {
		// A failure is recorded when the request gave up, up to its
		// timeout after it was sent: the window reaches 3.5 s back from
		// the first and 1 s past the last.
		first, last := slices.MinFunc(s.failedAt, time.Time.Compare), slices.MaxFunc(s.failedAt, time.Time.Compare)
		s.drops.report(t, first.Add(-3500*time.Millisecond), last.Add(time.Second))
	}
}
