package ofconn

import (
	"errors"
	"fmt"
	"strings"

	"nodeflow/lib/openflow"
)

// Sentinel errors. Errors returned by Conn wrap one of these, an
// *openflow.OFError, a context error or the network error that caused them.
var (
	// ErrClosed means Close was called.
	ErrClosed = errors.New("connection closed")
	// ErrDisconnected means the connection to the switch was lost (or not
	// yet re-established) while the operation ran. The operation may or may
	// not have taken effect; Conn reconnects by itself.
	ErrDisconnected = errors.New("disconnected")
	// ErrEchoTimeout means the switch did not answer an echo request in time.
	ErrEchoTimeout = errors.New("echo timeout")
	// ErrVersion means the switch speaks none of the configured versions.
	ErrVersion = errors.New("no common openflow version")
)

// OpError is the error of a Conn operation: what was being done, and why it
// failed. It unwraps to the cause.
type OpError struct {
	// Op names the operation, e.g. "barrier", "bundle 7 commit" or "dial".
	Op string
	// Addr is the switch address.
	Addr string
	// Err is the cause.
	Err error
}

// Error returns e.g. "ofconn: bundle 7 commit: message 3 of 12 (...): OFPBAC_BAD_OUT_GROUP (type 2 code 9)".
func (e *OpError) Error() string {
	return "ofconn: " + e.Op + ": " + e.Err.Error()
}

// Unwrap returns the cause.
func (e *OpError) Unwrap() error { return e.Err }

// MessageError says which message of a batch (a bundle, or messages sent by
// Apply) the switch rejected, and why.
type MessageError struct {
	// Index is the message's position in the batch, from 0.
	Index int
	// Total is the number of messages in the batch.
	Total int
	// Message is the rejected message.
	Message openflow.Message
	// Err is the switch's error (an *openflow.OFError) or an encoding error.
	Err error
}

// Error returns e.g. "message 3 of 12 (flow mod ...): OFPBAC_BAD_OUT_GROUP (type 2 code 9)",
// counting from 1.
func (e *MessageError) Error() string {
	return fmt.Sprintf("message %d of %d (%s): %v", e.Index+1, e.Total, describe(e.Message), e.Err)
}

// Unwrap returns the cause.
func (e *MessageError) Unwrap() error { return e.Err }

// BatchError holds every MessageError of one batch, in message order.
type BatchError struct {
	Errors []*MessageError
}

// Error names the first failure and counts the others.
func (e *BatchError) Error() string {
	if len(e.Errors) == 1 {
		return e.Errors[0].Error()
	}
	return fmt.Sprintf("%d of %d messages failed, first: %v", len(e.Errors), e.Errors[0].Total, e.Errors[0])
}

// Unwrap returns the individual errors, so errors.As finds the first
// *MessageError and errors.Is matches any *openflow.OFError among them.
func (e *BatchError) Unwrap() []error {
	errs := make([]error, len(e.Errors))
	for i, m := range e.Errors {
		errs[i] = m
	}
	return errs
}

// describe renders a message for an error: its String() if it has one,
// otherwise its Go type.
func describe(m openflow.Message) string {
	if m == nil {
		return "nil"
	}
	if s, ok := m.(fmt.Stringer); ok {
		str := s.String()
		if len(str) > 200 {
			str = str[:200] + "..."
		}
		return str
	}
	return strings.TrimPrefix(fmt.Sprintf("%T", m), "*")
}
