package ovsdb

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// The OVSDB data notation of RFC 7047 section 5.1, and its Go form:
//
//	<string>      a JSON string                    Go string
//	<integer>     a JSON number without fraction   Go int64
//	<real>        a JSON number                    Go float64
//	<boolean>     true or false                    Go bool
//	<uuid>        ["uuid", "<8-4-4-4-12 hex>"]     UUID
//	<named-uuid>  ["named-uuid", "<id>"]           NamedUUID
//	<set>         <atom> | ["set", [<atom>*]]      Set (or the bare atom)
//	<map>         ["map", [[<atom>, <atom>]*]]     Map
//
// A one-element set may be written as its bare atom, so a decoded set column
// with one element comes back as that atom. The typed accessors (and the
// typed rows) accept either form.

// ErrMalformed is wrapped by every error about a value, row or message that
// does not follow the OVSDB notation.
var ErrMalformed = errors.New("malformed")

// UUID is an OVSDB row identifier in its textual form
// ("550e8400-e29b-41d4-a716-446655440000"). It encodes as ["uuid", "..."].
type UUID string

// NamedUUID names a row inserted earlier in the same transaction (the
// "uuid-name" of an insert). It encodes as ["named-uuid", "..."].
type NamedUUID string

// Set is an OVSDB set: its elements are atoms (string, int64, float64, bool,
// UUID, NamedUUID), without duplicates. It always encodes in the
// ["set", [...]] form.
type Set []any

// Map is an OVSDB map: keys and values are atoms. It encodes as
// ["map", [[k, v], ...]] with the keys in a stable order.
type Map map[any]any

// Row is an OVSDB row: column name to value. Values are atoms, Sets or Maps;
// when encoding, a few plain Go forms are accepted too (int, []string,
// []UUID, map[string]string, map[string]int64).
type Row map[string]any

// ValidUUID reports whether s is in the 8-4-4-4-12 hexadecimal form.
func ValidUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
				return false
			}
		}
	}
	return true
}

// ValidID reports whether s is a valid <id>: [a-zA-Z_][a-zA-Z0-9_]*, the
// form of named-uuids and of database, table and column names.
func ValidID(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z':
		case i > 0 && '0' <= c && c <= '9':
		default:
			return false
		}
	}
	return true
}

// MarshalJSON encodes u as ["uuid", u].
func (u UUID) MarshalJSON() ([]byte, error) {
	if !ValidUUID(string(u)) {
		return nil, fmt.Errorf("ovsdb: uuid %q: %w: not in 8-4-4-4-12 hex form", string(u), ErrMalformed)
	}
	return []byte(`["uuid","` + string(u) + `"]`), nil
}

// UnmarshalJSON decodes ["uuid", "..."].
func (u *UUID) UnmarshalJSON(b []byte) error {
	v, err := decodeValue(b)
	if err != nil {
		return fmt.Errorf("ovsdb: uuid: %w", err)
	}
	x, ok := v.(UUID)
	if !ok {
		return fmt.Errorf("ovsdb: uuid: %w: got %s", ErrMalformed, kindOf(v))
	}
	*u = x
	return nil
}

// MarshalJSON encodes n as ["named-uuid", n].
func (n NamedUUID) MarshalJSON() ([]byte, error) {
	if !ValidID(string(n)) {
		return nil, fmt.Errorf("ovsdb: named-uuid %q: %w: not an <id>", string(n), ErrMalformed)
	}
	return []byte(`["named-uuid","` + string(n) + `"]`), nil
}

// MarshalJSON encodes s as ["set", [...]].
func (s Set) MarshalJSON() ([]byte, error) { return appendValue(nil, s) }

// MarshalJSON encodes m as ["map", [[k, v], ...]], keys sorted.
func (m Map) MarshalJSON() ([]byte, error) { return appendValue(nil, m) }

// MarshalJSON encodes r as a JSON object of <value>s, columns sorted.
func (r Row) MarshalJSON() ([]byte, error) { return appendRow(nil, r) }

// UnmarshalJSON decodes a JSON object of <value>s.
func (r *Row) UnmarshalJSON(b []byte) error {
	row, err := DecodeRow(b)
	if err != nil {
		return err
	}
	*r = row
	return nil
}

// EncodeValue encodes v (an atom, Set, Map, or one of the plain Go forms
// listed at Row) in the OVSDB notation.
func EncodeValue(v any) ([]byte, error) { return appendValue(nil, v) }

// DecodeValue decodes one <value> (an atom, a set or a map). Integers come
// back as int64, reals as float64, uuids as UUID, named-uuids as NamedUUID,
// sets as Set and maps as Map. The result keeps no reference to b.
func DecodeValue(b []byte) (any, error) {
	v, err := decodeValue(b)
	if err != nil {
		return nil, fmt.Errorf("ovsdb: value: %w", err)
	}
	return v, nil
}

func decodeValue(b []byte) (any, error) {
	raw, err := decodeJSON(b)
	if err != nil {
		return nil, err
	}
	return valueFromJSON(raw)
}

// DecodeRow decodes a <row>: a JSON object whose members are <value>s.
func DecodeRow(b []byte) (Row, error) {
	r, err := decodeRow(b)
	if err != nil {
		return nil, fmt.Errorf("ovsdb: row: %w", err)
	}
	return r, nil
}

func decodeRow(b []byte) (Row, error) {
	raw, err := decodeJSON(b)
	if err != nil {
		return nil, err
	}
	return rowFromJSON(raw)
}

// decodeJSON parses exactly one JSON document with numbers kept as json.Number.
func decodeJSON(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var raw any
	if err := d.Decode(&raw); err != nil {
		return nil, fmt.Errorf("%w: invalid JSON: %v", ErrMalformed, err)
	}
	if _, err := d.Token(); err == nil {
		return nil, fmt.Errorf("%w: trailing data after JSON value", ErrMalformed)
	}
	return raw, nil
}

// rowFromJSON converts a generic JSON object into a Row.
func rowFromJSON(raw any) (Row, error) {
	obj, ok := raw.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%w: want a JSON object, got %s", ErrMalformed, jsonKind(raw))
	}
	row := make(Row, len(obj))
	for col, rv := range obj {
		v, err := valueFromJSON(rv)
		if err != nil {
			return nil, fmt.Errorf("column %s: %w", col, err)
		}
		row[col] = v
	}
	return row, nil
}

// valueFromJSON converts a generic JSON value (numbers as json.Number) into
// an atom, Set or Map.
func valueFromJSON(raw any) (any, error) {
	arr, ok := raw.([]any)
	if !ok {
		return atomFromJSON(raw)
	}
	tag, body, err := taggedPair(arr)
	if err != nil {
		return nil, err
	}
	switch tag {
	case "uuid", "named-uuid":
		return atomFromJSON(raw)
	case "set":
		elems, ok := body.([]any)
		if !ok {
			return nil, fmt.Errorf("%w: set: want an array of atoms, got %s", ErrMalformed, jsonKind(body))
		}
		set := make(Set, 0, len(elems))
		seen := make(map[any]struct{}, len(elems))
		for i, e := range elems {
			a, err := atomFromJSON(e)
			if err != nil {
				return nil, fmt.Errorf("set element %d: %w", i, err)
			}
			if _, dup := seen[a]; dup {
				return nil, fmt.Errorf("%w: set element %d: duplicate %s", ErrMalformed, i, atomString(a))
			}
			seen[a] = struct{}{}
			set = append(set, a)
		}
		return set, nil
	case "map":
		pairs, ok := body.([]any)
		if !ok {
			return nil, fmt.Errorf("%w: map: want an array of pairs, got %s", ErrMalformed, jsonKind(body))
		}
		m := make(Map, len(pairs))
		for i, p := range pairs {
			pair, ok := p.([]any)
			if !ok || len(pair) != 2 {
				return nil, fmt.Errorf("%w: map pair %d: want [key, value]", ErrMalformed, i)
			}
			k, err := atomFromJSON(pair[0])
			if err != nil {
				return nil, fmt.Errorf("map pair %d key: %w", i, err)
			}
			v, err := atomFromJSON(pair[1])
			if err != nil {
				return nil, fmt.Errorf("map pair %d value: %w", i, err)
			}
			if _, dup := m[k]; dup {
				return nil, fmt.Errorf("%w: map pair %d: duplicate key %s", ErrMalformed, i, atomString(k))
			}
			m[k] = v
		}
		return m, nil
	default:
		return nil, fmt.Errorf("%w: unknown value tag %q (want uuid, named-uuid, set or map)", ErrMalformed, tag)
	}
}

// taggedPair splits ["tag", body].
func taggedPair(arr []any) (string, any, error) {
	if len(arr) != 2 {
		return "", nil, fmt.Errorf("%w: want a 2-element [tag, value] array, got %d elements", ErrMalformed, len(arr))
	}
	tag, ok := arr[0].(string)
	if !ok {
		return "", nil, fmt.Errorf("%w: array tag is %s, want a string", ErrMalformed, jsonKind(arr[0]))
	}
	return tag, arr[1], nil
}

// atomFromJSON converts a generic JSON value into an atom.
func atomFromJSON(raw any) (any, error) {
	switch x := raw.(type) {
	case string:
		return x, nil
	case bool:
		return x, nil
	case json.Number:
		return numberAtom(string(x))
	case []any:
		tag, body, err := taggedPair(x)
		if err != nil {
			return nil, err
		}
		if tag != "uuid" && tag != "named-uuid" {
			return nil, fmt.Errorf("%w: atom tag %q (want uuid or named-uuid)", ErrMalformed, tag)
		}
		id, ok := body.(string)
		if !ok {
			return nil, fmt.Errorf("%w: %s: want a string, got %s", ErrMalformed, tag, jsonKind(body))
		}
		if tag == "uuid" {
			if !ValidUUID(id) {
				return nil, fmt.Errorf("%w: uuid %q: not in 8-4-4-4-12 hex form", ErrMalformed, id)
			}
			return UUID(id), nil
		}
		if !ValidID(id) {
			return nil, fmt.Errorf("%w: named-uuid %q: not an <id>", ErrMalformed, id)
		}
		return NamedUUID(id), nil
	default:
		return nil, fmt.Errorf("%w: want an atom, got %s", ErrMalformed, jsonKind(raw))
	}
}

// numberAtom decides between <integer> and <real>: a number written without
// fraction or exponent is an integer and must fit in 64 bits.
func numberAtom(s string) (any, error) {
	if !strings.ContainsAny(s, ".eE") {
		i, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: integer %s out of 64-bit range", ErrMalformed, s)
		}
		return i, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(f, 0) {
		return nil, fmt.Errorf("%w: real %s out of range", ErrMalformed, s)
	}
	return f, nil
}

// appendValue appends the encoding of v.
func appendValue(b []byte, v any) ([]byte, error) {
	switch x := v.(type) {
	case Set:
		b = append(b, `["set",[`...)
		for i, e := range x {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = appendAtom(b, e); err != nil {
				return nil, fmt.Errorf("set element %d: %w", i, err)
			}
		}
		return append(b, "]]"...), nil
	case Map:
		keys := make([]any, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sortAtoms(keys)
		b = append(b, `["map",[`...)
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, '[')
			var err error
			if b, err = appendAtom(b, k); err != nil {
				return nil, fmt.Errorf("map key %d: %w", i, err)
			}
			b = append(b, ',')
			if b, err = appendAtom(b, x[k]); err != nil {
				return nil, fmt.Errorf("map value for key %s: %w", atomString(k), err)
			}
			b = append(b, ']')
		}
		return append(b, "]]"...), nil
	case []string:
		s := make(Set, len(x))
		for i, e := range x {
			s[i] = e
		}
		return appendValue(b, s)
	case []UUID:
		s := make(Set, len(x))
		for i, e := range x {
			s[i] = e
		}
		return appendValue(b, s)
	case map[string]string:
		m := make(Map, len(x))
		for k, e := range x {
			m[k] = e
		}
		return appendValue(b, m)
	case map[string]int64:
		m := make(Map, len(x))
		for k, e := range x {
			m[k] = e
		}
		return appendValue(b, m)
	default:
		return appendAtom(b, v)
	}
}

// appendAtom appends the encoding of one atom.
func appendAtom(b []byte, v any) ([]byte, error) {
	switch x := v.(type) {
	case string:
		enc, err := json.Marshal(x)
		if err != nil {
			return nil, err
		}
		return append(b, enc...), nil
	case bool:
		return strconv.AppendBool(b, x), nil
	case int64:
		return strconv.AppendInt(b, x, 10), nil
	case int:
		return strconv.AppendInt(b, int64(x), 10), nil
	case int32:
		return strconv.AppendInt(b, int64(x), 10), nil
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nil, fmt.Errorf("%w: real %v has no JSON form", ErrMalformed, x)
		}
		s := strconv.FormatFloat(x, 'g', -1, 64)
		if !strings.ContainsAny(s, ".e") {
			s += ".0" // keep it a <real> when decoded again
		}
		return append(b, s...), nil
	case UUID:
		enc, err := x.MarshalJSON()
		if err != nil {
			return nil, err
		}
		return append(b, enc...), nil
	case NamedUUID:
		enc, err := x.MarshalJSON()
		if err != nil {
			return nil, err
		}
		return append(b, enc...), nil
	default:
		return nil, fmt.Errorf("%w: %T is not an OVSDB atom", ErrMalformed, v)
	}
}

// appendRow appends a <row> object with the columns sorted.
func appendRow(b []byte, r Row) ([]byte, error) {
	cols := make([]string, 0, len(r))
	for c := range r {
		cols = append(cols, c)
	}
	sort.Strings(cols)
	b = append(b, '{')
	for i, c := range cols {
		if i > 0 {
			b = append(b, ',')
		}
		enc, err := json.Marshal(c)
		if err != nil {
			return nil, err
		}
		b = append(append(b, enc...), ':')
		if b, err = appendValue(b, r[c]); err != nil {
			return nil, fmt.Errorf("column %s: %w", c, err)
		}
	}
	return append(b, '}'), nil
}

// atomRank orders atom types for sorting map keys.
func atomRank(v any) int {
	switch v.(type) {
	case bool:
		return 0
	case int64, int, int32:
		return 1
	case float64:
		return 2
	case string:
		return 3
	case UUID:
		return 4
	case NamedUUID:
		return 5
	}
	return 6
}

// sortAtoms sorts atoms by type, then value, for a deterministic encoding.
func sortAtoms(a []any) {
	sort.Slice(a, func(i, j int) bool { return atomLess(a[i], a[j]) })
}

func atomLess(x, y any) bool {
	rx, ry := atomRank(x), atomRank(y)
	if rx != ry {
		return rx < ry
	}
	switch a := x.(type) {
	case bool:
		return !a && y.(bool)
	case int64:
		return a < toInt64(y)
	case int:
		return int64(a) < toInt64(y)
	case int32:
		return int64(a) < toInt64(y)
	case float64:
		return a < y.(float64)
	case string:
		return a < y.(string)
	case UUID:
		return a < y.(UUID)
	case NamedUUID:
		return a < y.(NamedUUID)
	}
	return false
}

func toInt64(v any) int64 {
	switch a := v.(type) {
	case int64:
		return a
	case int:
		return int64(a)
	case int32:
		return int64(a)
	}
	return 0
}

// atomString renders an atom for error messages.
func atomString(v any) string {
	switch x := v.(type) {
	case string:
		return strconv.Quote(x)
	case UUID:
		return "uuid " + string(x)
	case NamedUUID:
		return "named-uuid " + string(x)
	default:
		return fmt.Sprint(v)
	}
}

// kindOf names the OVSDB kind of a decoded value for error messages.
func kindOf(v any) string {
	switch v.(type) {
	case nil:
		return "nothing"
	case string:
		return "string"
	case int64, int, int32:
		return "integer"
	case float64:
		return "real"
	case bool:
		return "boolean"
	case UUID:
		return "uuid"
	case NamedUUID:
		return "named-uuid"
	case Set:
		return "set"
	case Map:
		return "map"
	}
	return fmt.Sprintf("%T", v)
}

// jsonKind names the JSON kind of a generic JSON value for error messages.
func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case json.Number, float64:
		return "a number"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

// appendJSONString appends s as a JSON string.
func appendJSONString(b []byte, s string) []byte {
	enc, err := json.Marshal(s)
	if err != nil { // cannot happen for a string
		panic(err)
	}
	return append(b, enc...)
}
