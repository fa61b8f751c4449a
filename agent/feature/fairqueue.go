package feature

import (
	"context"
	"sync"
)

// fairQueue holds one category's waiting packet-ins, per source, and hands
// them out round robin: a source's packet-in waits for at most one of each
// other waiting source's, however many those hold. It holds at most limit
// packet-ins. When it is full, an arrival pushes out the newest packet-in
// of the source that holds the most (the arrival itself when its source
// holds the most): a flood fills the queue only while nobody else waits,
// and a source that holds fewer than limit/k of k waiting sources' never
// loses one. push never blocks.
type fairQueue struct {
	mu    sync.Mutex
	limit int
	n     int // packet-ins held
	// bySource holds each waiting source's packet-ins, oldest first; a
	// source without any has no entry.
	bySource map[uint64]*sourceQueue
	// turns is the round: the waiting sources, next first.
	turns []uint64
	// ready wakes pop when a packet-in arrives.
	ready chan struct{}
}

type sourceQueue struct {
	pins []PacketIn
	head int
}

func (s *sourceQueue) len() int { return len(s.pins) - s.head }

func newFairQueue(limit int) *fairQueue {
	return &fairQueue{limit: limit, bySource: map[uint64]*sourceQueue{}, ready: make(chan struct{}, 1)}
}

// push queues p for src, and reports whether a packet-in was dropped to
// make room: when the queue is full, the newest packet-in of the source
// that holds the most, or p itself when that is src (on a tie too).
func (q *fairQueue) push(src uint64, p PacketIn) (dropped bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.n >= q.limit {
		longest, most := uint64(0), -1
		for k, o := range q.bySource {
			if l := o.len(); l > most || (l == most && k == src) {
				longest, most = k, l
			}
		}
		if longest == src {
			return true
		}
		o := q.bySource[longest]
		o.pins[len(o.pins)-1] = PacketIn{}
		o.pins = o.pins[:len(o.pins)-1]
		q.n--
		if o.len() == 0 {
			q.forget(longest)
		}
		dropped = true
	}
	q.pushLocked(src, p)
	return dropped
}

// pushLocked appends p to src's queue, giving src a turn if it had none.
func (q *fairQueue) pushLocked(src uint64, p PacketIn) {
	s := q.bySource[src]
	if s == nil {
		s = &sourceQueue{}
		q.bySource[src] = s
		q.turns = append(q.turns, src)
	}
	s.pins = append(s.pins, p)
	q.n++
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// forget removes src, which holds nothing, from the queue and the round.
func (q *fairQueue) forget(src uint64) {
	delete(q.bySource, src)
	for i, k := range q.turns {
		if k == src {
			q.turns = append(q.turns[:i], q.turns[i+1:]...)
			return
		}
	}
}

// pop returns the oldest packet-in of the source whose turn it is, which
// then goes to the end of the round; it waits for one, and returns false
// when ctx ends.
func (q *fairQueue) pop(ctx context.Context) (PacketIn, bool) {
	for {
		q.mu.Lock()
		if q.n > 0 {
			src := q.turns[0]
			q.turns = q.turns[1:]
			s := q.bySource[src]
			p := s.pins[s.head]
			s.pins[s.head] = PacketIn{}
			s.head++
			q.n--
			if s.len() == 0 {
				delete(q.bySource, src)
			} else {
				q.turns = append(q.turns, src)
			}
			q.mu.Unlock()
			return p, true
		}
		q.mu.Unlock()
		select {
		case <-ctx.Done():
			return PacketIn{}, false
		case <-q.ready:
		}
	}
}

// len returns how many packet-ins the queue holds.
func (q *fairQueue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n
}
