package ovsdb

import (
	"fmt"
	"sort"
)

// Conversions from decoded values to plain Go types. Each accepts both forms
// a set column may arrive in: ["set", [...]] and the bare one-element atom.

// setElems returns the elements of a set value, or the single bare atom.
func setElems(v any) ([]any, bool) {
	switch x := v.(type) {
	case Set:
		return x, true
	case Map, nil:
		return nil, false
	default:
		return []any{x}, true
	}
}

// String converts a <string> value.
func String(v any) (string, error) {
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("%w: want a string, got %s", ErrMalformed, kindOf(v))
	}
	return s, nil
}

// OptionalString converts a string set of at most one element (min 0, max 1)
// to its element, or "" when the set is empty.
func OptionalString(v any) (string, error) {
	elems, ok := setElems(v)
	if !ok || len(elems) > 1 {
		return "", fmt.Errorf("%w: want an optional string, got %s", ErrMalformed, kindOf(v))
	}
	if len(elems) == 0 {
		return "", nil
	}
	return String(elems[0])
}

// Integer converts an <integer> value.
func Integer(v any) (int64, error) {
	switch x := v.(type) {
	case int64:
		return x, nil
	case int:
		return int64(x), nil
	}
	return 0, fmt.Errorf("%w: want an integer, got %s", ErrMalformed, kindOf(v))
}

// OptionalInteger converts an integer set of at most one element. ok is false
// when the set is empty.
func OptionalInteger(v any) (n int64, ok bool, err error) {
	elems, isSet := setElems(v)
	if !isSet || len(elems) > 1 {
		return 0, false, fmt.Errorf("%w: want an optional integer, got %s", ErrMalformed, kindOf(v))
	}
	if len(elems) == 0 {
		return 0, false, nil
	}
	n, err = Integer(elems[0])
	return n, err == nil, err
}

// Boolean converts a <boolean> value.
func Boolean(v any) (bool, error) {
	b, ok := v.(bool)
	if !ok {
		return false, fmt.Errorf("%w: want a boolean, got %s", ErrMalformed, kindOf(v))
	}
	return b, nil
}

// StringSet converts a set of strings.
func StringSet(v any) ([]string, error) {
	elems, ok := setElems(v)
	if !ok {
		return nil, fmt.Errorf("%w: want a set of strings, got %s", ErrMalformed, kindOf(v))
	}
	out := make([]string, 0, len(elems))
	for i, e := range elems {
		s, ok := e.(string)
		if !ok {
			return nil, fmt.Errorf("%w: set element %d: want a string, got %s", ErrMalformed, i, kindOf(e))
		}
		out = append(out, s)
	}
	return out, nil
}

// UUIDSet converts a set of uuids.
func UUIDSet(v any) ([]UUID, error) {
	elems, ok := setElems(v)
	if !ok {
		return nil, fmt.Errorf("%w: want a set of uuids, got %s", ErrMalformed, kindOf(v))
	}
	out := make([]UUID, 0, len(elems))
	for i, e := range elems {
		u, ok := e.(UUID)
		if !ok {
			return nil, fmt.Errorf("%w: set element %d: want a uuid, got %s", ErrMalformed, i, kindOf(e))
		}
		out = append(out, u)
	}
	return out, nil
}

// StringMap converts a map from string to string.
func StringMap(v any) (map[string]string, error) {
	m, ok := v.(Map)
	if !ok {
		return nil, fmt.Errorf("%w: want a map, got %s", ErrMalformed, kindOf(v))
	}
	out := make(map[string]string, len(m))
	for k, e := range m {
		ks, ok1 := k.(string)
		es, ok2 := e.(string)
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("%w: map entry %s: want string to string, got %s to %s", ErrMalformed, atomString(k), kindOf(k), kindOf(e))
		}
		out[ks] = es
	}
	return out, nil
}

// IntegerMap converts a map from string to integer.
func IntegerMap(v any) (map[string]int64, error) {
	m, ok := v.(Map)
	if !ok {
		return nil, fmt.Errorf("%w: want a map, got %s", ErrMalformed, kindOf(v))
	}
	out := make(map[string]int64, len(m))
	for k, e := range m {
		ks, ok1 := k.(string)
		ei, ok2 := e.(int64)
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("%w: map entry %s: want string to integer, got %s to %s", ErrMalformed, atomString(k), kindOf(k), kindOf(e))
		}
		out[ks] = ei
	}
	return out, nil
}

// MakeStringSet builds a Set from strings, sorted, without duplicates.
func MakeStringSet(ss ...string) Set {
	c := append([]string(nil), ss...)
	sort.Strings(c)
	out := make(Set, 0, len(c))
	for i, s := range c {
		if i > 0 && c[i-1] == s {
			continue
		}
		out = append(out, s)
	}
	return out
}

// MakeUUIDSet builds a Set from uuids and named-uuids (UUID or NamedUUID values).
func MakeUUIDSet[T UUID | NamedUUID](us ...T) Set {
	out := make(Set, 0, len(us))
	for _, u := range us {
		out = append(out, u)
	}
	return out
}

// MakeStringMap builds a Map from a Go map of strings.
func MakeStringMap(m map[string]string) Map {
	out := make(Map, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// OptionalIntegerValue builds the value of an optional integer column: the
// empty set when ok is false.
func OptionalIntegerValue(n int64, ok bool) Set {
	if !ok {
		return Set{}
	}
	return Set{n}
}

// OptionalStringValue builds the value of an optional string column: the
// empty set for "".
func OptionalStringValue(s string) Set {
	if s == "" {
		return Set{}
	}
	return Set{s}
}
