package netstack

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// EventKind says what a netlink event is about.
type EventKind int

// Kinds of netlink events, to subscribe to (or together) and as reported.
const (
	LinkEvents EventKind = 1 << iota
	AddrEvents
	RouteEvents
	NeighEvents
	// Resync is reported (never subscribed to) after the subscription
	// failed and was made again: events may have been missed.
	Resync
)

// Event is one netlink event, reduced to what the agent's repairs look at.
type Event struct {
	Kind EventKind
	// Deleted is set for a deleted address, route or neighbour (or link).
	Deleted bool
	// LinkIndex is the interface the event is about.
	LinkIndex int
	// IP is the address's or the neighbour's IP; invalid for links and
	// routes.
	IP netip.Addr
	// Permanent is set for a neighbour entry in state PERMANENT.
	Permanent bool
}

// watchReceiveBuffer is the subscriptions' socket receive buffer: a burst
// of events (a link coming up with its routes, a thousand neighbours)
// must not overflow it, or the subscription fails.
const watchReceiveBuffer = 1 << 20

// watchRetry is the pause before a failed subscription is made again.
const watchRetry = time.Second

// Watch subscribes to the netlink events of kinds and calls on with each
// one, from one goroutine, until ctx ends. A subscription that fails
// (the kernel dropped events for a full socket buffer, say) is made again
// after a second, and on is then called with a Resync event, since events
// were missed. It returns an error only when it cannot subscribe at all
// the first time.
func Watch(ctx context.Context, log logrus.FieldLogger, kinds EventKind, on func(Event)) error {
	first := true
	for ctx.Err() == nil {
		err := watchOnce(ctx, kinds, on, func() {
			if !first {
				on(Event{Kind: Resync})
			}
			first = false
		})
		if err != nil && first {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
		log.WithError(err).Warn("netlink event subscription failed; subscribing again")
		first = false
		select {
		case <-ctx.Done():
		case <-time.After(watchRetry):
		}
	}
	return nil
}

// watchOnce runs one set of subscriptions until one fails or ctx ends;
// subscribed is called once they all exist.
func watchOnce(ctx context.Context, kinds EventKind, on func(Event), subscribed func()) error {
	done := make(chan struct{})
	defer close(done)
	failed := make(chan error, 4)
	onErr := func(err error) {
		select {
		case failed <- err:
		default:
		}
	}
	var (
		links  chan netlink.LinkUpdate
		addrs  chan netlink.AddrUpdate
		routes chan netlink.RouteUpdate
		neighs chan netlink.NeighUpdate
	)
	if kinds&LinkEvents != 0 {
		links = make(chan netlink.LinkUpdate, 64)
		if err := netlink.LinkSubscribeWithOptions(links, done, netlink.LinkSubscribeOptions{ErrorCallback: onErr, ReceiveBufferSize: watchReceiveBuffer}); err != nil {
			return fmt.Errorf("hostnet: subscribe to link events: %w", err)
		}
	}
	if kinds&AddrEvents != 0 {
		addrs = make(chan netlink.AddrUpdate, 64)
		if err := netlink.AddrSubscribeWithOptions(addrs, done, netlink.AddrSubscribeOptions{ErrorCallback: onErr, ReceiveBufferSize: watchReceiveBuffer}); err != nil {
			return fmt.Errorf("hostnet: subscribe to address events: %w", err)
		}
	}
	if kinds&RouteEvents != 0 {
		routes = make(chan netlink.RouteUpdate, 64)
		if err := netlink.RouteSubscribeWithOptions(routes, done, netlink.RouteSubscribeOptions{ErrorCallback: onErr, ReceiveBufferSize: watchReceiveBuffer}); err != nil {
			return fmt.Errorf("hostnet: subscribe to route events: %w", err)
		}
	}
	if kinds&NeighEvents != 0 {
		neighs = make(chan netlink.NeighUpdate, 64)
		if err := netlink.NeighSubscribeWithOptions(neighs, done, netlink.NeighSubscribeOptions{ErrorCallback: onErr, ReceiveBufferSize: watchReceiveBuffer}); err != nil {
			return fmt.Errorf("hostnet: subscribe to neighbour events: %w", err)
		}
	}
	subscribed()
	closed := errors.New("subscription closed")
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-failed:
			return err
		case u, ok := <-links:
			if !ok {
				return fmt.Errorf("hostnet: link events: %w", closed)
			}
			on(Event{Kind: LinkEvents, Deleted: u.Header.Type == unix.RTM_DELLINK, LinkIndex: int(u.Index)})
		case u, ok := <-addrs:
			if !ok {
				return fmt.Errorf("hostnet: address events: %w", closed)
			}
			ip, _ := netip.AddrFromSlice(u.LinkAddress.IP)
			on(Event{Kind: AddrEvents, Deleted: !u.NewAddr, LinkIndex: u.LinkIndex, IP: ip.Unmap()})
		case u, ok := <-routes:
			if !ok {
				return fmt.Errorf("hostnet: route events: %w", closed)
			}
			on(Event{Kind: RouteEvents, Deleted: u.Type == unix.RTM_DELROUTE, LinkIndex: u.LinkIndex})
		case u, ok := <-neighs:
			if !ok {
				return fmt.Errorf("hostnet: neighbour events: %w", closed)
			}
			ip, _ := netip.AddrFromSlice(u.IP)
			on(Event{Kind: NeighEvents, Deleted: u.Type == unix.RTM_DELNEIGH, LinkIndex: u.LinkIndex, IP: ip.Unmap(),
				Permanent: u.State&netlink.NUD_PERMANENT != 0})
		}
	}
}
