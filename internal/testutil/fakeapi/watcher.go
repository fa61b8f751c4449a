package fakeapi

import (
	"sync"

	"k8s.io/apimachinery/pkg/watch"
)

// watcher is the watch.Interface the fake API serves: it delivers the
// events it is given in order, through an unbounded queue, so that the
// fake never blocks on a slow consumer (apimachinery's fake watchers
// buffer 100 events and then block or panic). It is safe for concurrent
// use.
type watcher struct {
	ch   chan watch.Event
	mu   sync.Mutex
	q    []watch.Event
	wake chan struct{}
	done chan struct{}
	once sync.Once
}

// newWatcher returns a watcher with its delivery running; Stop ends it.
func newWatcher() *watcher {
	w := &watcher{ch: make(chan watch.Event), wake: make(chan struct{}, 1), done: make(chan struct{})}
	go w.loop()
	return w
}

// push queues ev for delivery after every event pushed before it.
func (w *watcher) push(ev watch.Event) {
	w.mu.Lock()
	w.q = append(w.q, ev)
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// loop delivers the queue until Stop.
func (w *watcher) loop() {
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
func (w *watcher) ResultChan() <-chan watch.Event { return w.ch }

// Stop implements watch.Interface: delivery ends and the channel closes.
// It may be called more than once.
func (w *watcher) Stop() { w.once.Do(func() { close(w.done) }) }

// stopped reports whether Stop was called.
func (w *watcher) stopped() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}
