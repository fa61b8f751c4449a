// Package watchtest is a watch.Interface for fake API servers in tests:
// it delivers the events it is given in order, through an unbounded queue,
// so that a fake never blocks on a slow consumer.
package watchtest

import (
	"sync"

	"k8s.io/apimachinery/pkg/watch"
)

// Watcher is a watch.Interface fed by Push. It is safe for concurrent use.
type Watcher struct {
	ch   chan watch.Event
	mu   sync.Mutex
	q    []watch.Event
	wake chan struct{}
	done chan struct{}
	once sync.Once
}

// New returns a Watcher with its delivery running; Stop ends it.
func New() *Watcher {
	w := &Watcher{ch: make(chan watch.Event), wake: make(chan struct{}, 1), done: make(chan struct{})}
	go w.loop()
	return w
}

// Push queues ev for delivery after every event pushed before it.
func (w *Watcher) Push(ev watch.Event) {
	w.mu.Lock()
	w.q = append(w.q, ev)
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// loop delivers the queue until Stop.
func (w *Watcher) loop() {
	defer close(w.ch)
	for {
		w.mu.Lock()
		var ev *watch.Event
		if len(w.q) > 0 {
			ev = &w.q[0]
			w.q = w.q[1:]
		}
		w.mu.Unlock()
		if ev == nil {
			select {
			case <-w.wake:
				continue
			case <-w.done:
				return
			}
		}
		select {
		case w.ch <- *ev:
		case <-w.done:
			return
		}
	}
}

// ResultChan implements watch.Interface.
func (w *Watcher) ResultChan() <-chan watch.Event { return w.ch }

// Stop implements watch.Interface: delivery ends and the channel closes.
// It may be called more than once.
func (w *Watcher) Stop() { w.once.Do(func() { close(w.done) }) }

// Stopped reports whether Stop was called.
func (w *Watcher) Stopped() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}
