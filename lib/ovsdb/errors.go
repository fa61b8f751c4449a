package ovsdb

import "strings"

// wrapped adds context to an error, keeping a single "ovsdb: " prefix when
// the cause has one of its own.
type wrapped struct {
	context string
	err     error
}

// wrap returns err with "ovsdb: <context>: " in front, or nil for nil.
func wrap(err error, context string) error {
	if err == nil {
		return nil
	}
	return &wrapped{context: context, err: err}
}

// Error formats the context and the cause without a repeated package prefix.
func (e *wrapped) Error() string {
	return "ovsdb: " + e.context + ": " + strings.TrimPrefix(e.err.Error(), "ovsdb: ")
}

// Unwrap returns the cause.
func (e *wrapped) Unwrap() error { return e.err }
