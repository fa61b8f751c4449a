// Package logtest gives tests a logrus logger that is quiet unless the
// test runs with -v.
package logtest

import (
	"io"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
)

// New returns a logger that discards what it is given, or, with -v, logs
// it through t at debug level.
func New(t testing.TB) *logrus.Logger {
	log := logrus.New()
	log.SetOutput(io.Discard)
	if testing.Verbose() {
		log.SetOutput(writer{t})
		log.SetLevel(logrus.DebugLevel)
	}
	return log
}

type writer struct{ t testing.TB }

func (w writer) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}
