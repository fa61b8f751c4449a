package e2e

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// background is traffic that runs while a test changes something under
// it (rules, an agent, the switch), until end.
type background struct {
	stop chan struct{}
	wg   sync.WaitGroup
}

func newBackground() *background { return &background{stop: make(chan struct{})} }

// tally counts the attempts of one kind of background traffic: those that
// went as they should, those that did not, and the first that did not.
type tally struct {
	ok, fail atomic.Int64
	first    atomic.Value
}

// tries is how many attempts there were.
func (c *tally) tries() int64 { return c.ok.Load() + c.fail.Load() }

// String is "N ok, M failed (first: ...)".
func (c *tally) String() string {
	return fmt.Sprintf("%d ok, %d failed (first: %v)", c.ok.Load(), c.fail.Load(), c.first.Load())
}

// loop runs try in a goroutine of its own, waiting pause before each
// attempt (0: back to back), until end; each error try returns counts as
// a failure in c.
func (b *background) loop(c *tally, pause time.Duration, try func() error) {
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		for {
			select {
			case <-b.stop:
				return
			case <-time.After(pause):
			}
			if err := try(); err != nil {
				c.fail.Add(1)
				c.first.CompareAndSwap(nil, err.Error())
			} else {
				c.ok.Add(1)
			}
		}
	}()
}

// end stops every loop and waits for them.
func (b *background) end() {
	close(b.stop)
	b.wg.Wait()
}

// deniedErr is the error of a background attempt that should have been
// denied and got through.
func deniedErr(what string, err error) error {
	if err == nil {
		return fmt.Errorf("%s: got through", what)
	}
	return nil
}
