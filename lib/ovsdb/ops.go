package ovsdb

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// Operation is one database operation of a transact request (RFC 7047
// section 5.2). Build operations with Insert, Select, Update, Mutate, Delete,
// Wait and Comment; the fields a kind of operation does not use are ignored
// when it is encoded.
type Operation struct {
	// Op is the operation name: "insert", "select", "update", "mutate",
	// "delete", "wait", "comment", "commit" or "abort".
	Op string
	// Table the operation applies to.
	Table string
	// Row is the row to insert or the columns to update.
	Row Row
	// UUIDName names an inserted row, so that later operations of the same
	// transaction can refer to it as NamedUUID(UUIDName).
	UUIDName string
	// Where selects rows (select, update, mutate, delete, wait).
	Where []Condition
	// Columns restricts select results, or names the columns wait compares.
	Columns []string
	// Mutations of a mutate.
	Mutations []Mutation
	// Rows a wait compares against; Until is "==" or "!=".
	Rows  []Row
	Until string
	// Timeout of a wait in milliseconds; nil waits forever.
	Timeout *int
	// Comment text of a comment operation.
	Comment string
	// Durable asks a commit operation to wait for the disk.
	Durable bool
}

// Condition is one <condition>: [column, function, value]. Function is one
// of "<", "<=", "==", "!=", ">=", ">", "includes", "excludes".
type Condition struct {
	Column   string
	Function string
	Value    any
}

// Mutation is one <mutation>: [column, mutator, value]. Mutator is one of
// "+=", "-=", "*=", "/=", "%=", "insert", "delete".
type Mutation struct {
	Column  string
	Mutator string
	Value   any
}

// Equal is the condition column == value.
func Equal(column string, value any) Condition {
	return Condition{Column: column, Function: "==", Value: value}
}

// NotEqual is the condition column != value.
func NotEqual(column string, value any) Condition {
	return Condition{Column: column, Function: "!=", Value: value}
}

// Includes is the condition "column includes value" (sets and maps).
func Includes(column string, value any) Condition {
	return Condition{Column: column, Function: "includes", Value: value}
}

// InsertMutation adds the elements of a set or the pairs of a map (keys
// already present are left alone).
func InsertMutation(column string, value any) Mutation {
	return Mutation{Column: column, Mutator: "insert", Value: value}
}

// DeleteMutation removes elements from a set, or from a map the keys of a
// set or the matching pairs of a map.
func DeleteMutation(column string, value any) Mutation {
	return Mutation{Column: column, Mutator: "delete", Value: value}
}

// Insert inserts row into table. uuidName, when not "", names the new row for
// the rest of the transaction.
func Insert(table string, row Row, uuidName string) Operation {
	return Operation{Op: "insert", Table: table, Row: row, UUIDName: uuidName}
}

// Select reads the rows of table matching where; columns, when given,
// restricts the columns returned.
func Select(table string, where []Condition, columns ...string) Operation {
	return Operation{Op: "select", Table: table, Where: where, Columns: columns}
}

// Update sets the columns of row in every row of table matching where.
func Update(table string, where []Condition, row Row) Operation {
	return Operation{Op: "update", Table: table, Where: where, Row: row}
}

// Mutate applies mutations to every row of table matching where.
func Mutate(table string, where []Condition, mutations ...Mutation) Operation {
	return Operation{Op: "mutate", Table: table, Where: where, Mutations: mutations}
}

// Delete deletes every row of table matching where.
func Delete(table string, where []Condition) Operation {
	return Operation{Op: "delete", Table: table, Where: where}
}

// Wait blocks the transaction until the rows of table matching where,
// restricted to columns, are (until "==") or are not (until "!=") exactly
// rows. timeoutMs 0 makes it a test: the transaction fails at once with
// "timed out" when the condition does not hold.
func Wait(table string, where []Condition, columns []string, until string, rows []Row, timeoutMs int) Operation {
	t := timeoutMs
	return Operation{Op: "wait", Table: table, Where: where, Columns: columns, Until: until, Rows: rows, Timeout: &t}
}

// Comment adds text to the database log.
func Comment(text string) Operation {
	return Operation{Op: "comment", Comment: text}
}

// String names the operation for error messages: "insert Port".
func (o Operation) String() string {
	if o.Table == "" {
		return o.Op
	}
	return o.Op + " " + o.Table
}

// MarshalJSON encodes the operation with exactly the members its kind takes.
func (o Operation) MarshalJSON() ([]byte, error) {
	b, err := o.appendJSON(nil)
	if err != nil {
		return nil, fmt.Errorf("ovsdb: %s: %w", o, err)
	}
	return b, nil
}

func (o Operation) appendJSON(b []byte) ([]byte, error) {
	e := opEncoder{b: b}
	e.b = append(e.b, `{"op":`...)
	e.b = appendJSONString(e.b, o.Op)
	switch o.Op {
	case "insert":
		e.table(o.Table)
		e.row(o.Row)
		e.uuidName(o.UUIDName)
	case "select":
		e.table(o.Table)
		e.where(o.Where)
		e.columns(o.Columns)
	case "update":
		e.table(o.Table)
		e.where(o.Where)
		e.row(o.Row)
	case "mutate":
		e.table(o.Table)
		e.where(o.Where)
		e.mutations(o.Mutations)
	case "delete":
		e.table(o.Table)
		e.where(o.Where)
	case "wait":
		e.table(o.Table)
		e.where(o.Where)
		e.columns(o.Columns)
		e.until(o.Until, o.Rows, o.Timeout)
	case "comment":
		e.comment(o.Comment)
	case "commit":
		e.b = append(e.b, `,"durable":`...)
		e.b = strconv.AppendBool(e.b, o.Durable)
	case "abort":
	default:
		return nil, fmt.Errorf("unknown operation %q", o.Op)
	}
	if e.err != nil {
		return nil, e.err
	}
	return append(e.b, '}'), nil
}

// opEncoder appends the members of an operation to b, keeping the first
// error: after one, it appends nothing more.
type opEncoder struct {
	b   []byte
	err error
}

// table appends the "table" member; an operation on a table needs one.
func (e *opEncoder) table(table string) {
	if e.err != nil {
		return
	}
	if table == "" {
		e.err = errors.New("no table")
		return
	}
	e.b = append(e.b, `,"table":`...)
	e.b = appendJSONString(e.b, table)
}

// where appends the "where" member: [column, function, value] per
// condition.
func (e *opEncoder) where(where []Condition) {
	e.triples("where", len(where), func(i int) (string, string, any) {
		return where[i].Column, where[i].Function, where[i].Value
	}, func(i int, err error) error {
		return fmt.Errorf("where %d (%s): %w", i, where[i].Column, err)
	})
}

// triples appends member as a list of n [string, string, value] triples
// (the where clause and the mutations); at gives the i-th, and wrap
// names it in the error of a value that does not encode.
func (e *opEncoder) triples(member string, n int, at func(i int) (string, string, any), wrap func(i int, err error) error) {
	if e.err != nil {
		return
	}
	e.b = append(e.b, `,"`...)
	e.b = append(e.b, member...)
	e.b = append(e.b, `":[`...)
	for i := range n {
		if i > 0 {
			e.b = append(e.b, ',')
		}
		a, b, v := at(i)
		e.b = append(e.b, '[')
		e.b = appendJSONString(e.b, a)
		e.b = append(e.b, ',')
		e.b = appendJSONString(e.b, b)
		e.b = append(e.b, ',')
		var err error
		if e.b, err = appendValue(e.b, v); err != nil {
			e.err = wrap(i, err)
			return
		}
		e.b = append(e.b, ']')
	}
	e.b = append(e.b, ']')
}

// columns appends the "columns" member, unless columns is nil (all of
// them).
func (e *opEncoder) columns(columns []string) {
	if e.err != nil || columns == nil {
		return
	}
	e.b = append(e.b, `,"columns":[`...)
	for i, c := range columns {
		if i > 0 {
			e.b = append(e.b, ',')
		}
		e.b = appendJSONString(e.b, c)
	}
	e.b = append(e.b, ']')
}

// row appends the "row" member.
func (e *opEncoder) row(r Row) {
	if e.err != nil {
		return
	}
	e.b = append(e.b, `,"row":`...)
	var err error
	if e.b, err = appendRow(e.b, r); err != nil {
		e.err = fmt.Errorf("row: %w", err)
	}
}

// uuidName appends an insert's "uuid-name" member, if it has one.
func (e *opEncoder) uuidName(name string) {
	if e.err != nil || name == "" {
		return
	}
	if !ValidID(name) {
		e.err = fmt.Errorf("uuid-name %q is not an <id>", name)
		return
	}
	e.b = append(e.b, `,"uuid-name":`...)
	e.b = appendJSONString(e.b, name)
}

// mutations appends the "mutations" member: [column, mutator, value] per
// mutation.
func (e *opEncoder) mutations(ms []Mutation) {
	e.triples("mutations", len(ms), func(i int) (string, string, any) {
		return ms[i].Column, ms[i].Mutator, ms[i].Value
	}, func(i int, err error) error {
		return fmt.Errorf("mutation %d (%s %s): %w", i, ms[i].Column, ms[i].Mutator, err)
	})
}

// until appends a wait's "until", "rows" and, when it has one, "timeout"
// members.
func (e *opEncoder) until(until string, rows []Row, timeout *int) {
	if e.err != nil {
		return
	}
	if until != "==" && until != "!=" {
		e.err = fmt.Errorf("until %q (want == or !=)", until)
		return
	}
	e.b = append(e.b, `,"until":`...)
	e.b = appendJSONString(e.b, until)
	e.b = append(e.b, `,"rows":[`...)
	for i, r := range rows {
		if i > 0 {
			e.b = append(e.b, ',')
		}
		var err error
		if e.b, err = appendRow(e.b, r); err != nil {
			e.err = fmt.Errorf("rows %d: %w", i, err)
			return
		}
	}
	e.b = append(e.b, ']')
	if timeout != nil {
		e.b = append(e.b, `,"timeout":`...)
		e.b = strconv.AppendInt(e.b, int64(*timeout), 10)
	}
}

// comment appends a comment's "comment" member.
func (e *opEncoder) comment(text string) {
	enc, _ := json.Marshal(text)
	e.b = append(e.b, `,"comment":`...)
	e.b = append(e.b, enc...)
}

// OpResult is the result of one operation.
type OpResult struct {
	// UUID of the row an insert created.
	UUID UUID
	// Rows a select returned.
	Rows []Row
	// Count of rows an update, mutate or delete touched.
	Count int
}

// OpError is the failure of one operation of a transaction, as the server
// reported it. Index is the operation's position in the transaction; a
// failure at commit time (such as "referential integrity violation") has
// Index equal to the number of operations and Op "commit".
type OpError struct {
	Index   int
	Op      string
	Table   string
	Err     string
	Details string
}

// Error formats the failure as "op 2 (insert Port): constraint violation: details".
func (e *OpError) Error() string {
	what := e.Op
	if e.Table != "" {
		what += " " + e.Table
	}
	s := fmt.Sprintf("op %d (%s): %s", e.Index, what, e.Err)
	if e.Op == "commit" && e.Table == "" {
		s = fmt.Sprintf("commit: %s", e.Err)
	}
	if e.Details != "" {
		s += ": " + e.Details
	}
	return s
}

// Error strings a server reports for an operation (RFC 7047 sections 4.1.3
// and 5.2), for comparing with OpError.Err.
const (
	// ErrStrConstraintViolation: a value breaks its column's constraints
	// (an enum, a range, a duplicate in an index, ...).
	ErrStrConstraintViolation = "constraint violation"
	// ErrStrReferentialIntegrity: a strong reference points at no row, or
	// a referenced row would be deleted (reported at commit).
	ErrStrReferentialIntegrity = "referential integrity violation"
	// ErrStrTimedOut: a "wait" operation's condition did not hold in time.
	ErrStrTimedOut = "timed out"
	// ErrStrNotSupported: the operation is not supported.
	ErrStrNotSupported = "not supported"
	// ErrStrAborted: an "abort" operation ended the transaction.
	ErrStrAborted = "aborted"
	// ErrStrNotOwner: an "assert" on a lock the client does not own.
	ErrStrNotOwner = "not owner"
	// ErrStrResourcesExhausted: the server ran out of memory or rows.
	ErrStrResourcesExhausted = "resources exhausted"
	// ErrStrIOError: the server could not write the transaction to disk.
	ErrStrIOError = "I/O error"
	// ErrStrDuplicateUUIDName: two inserts use the same uuid-name.
	ErrStrDuplicateUUIDName = "duplicate uuid-name"
	// ErrStrDomainError: a mutation's arithmetic is undefined (division by zero).
	ErrStrDomainError = "domain error"
	// ErrStrRangeError: a mutation's result does not fit.
	ErrStrRangeError = "range error"
)

// wireOpResult is one element of a transact result array.
type wireOpResult struct {
	UUID    json.RawMessage   `json:"uuid"`
	Rows    []json.RawMessage `json:"rows"`
	Count   *int              `json:"count"`
	Error   *string           `json:"error"`
	Details string            `json:"details"`
}

// parseTransactResult decodes a transact result array for ops. It returns an
// *OpError for the first failed operation (or the commit).
func parseTransactResult(raw json.RawMessage, ops []Operation) ([]OpResult, error) {
	var elems []json.RawMessage
	if err := json.Unmarshal(raw, &elems); err != nil {
		return nil, fmt.Errorf("%w: result is not an array: %v", ErrMalformed, err)
	}
	out := make([]OpResult, len(ops))
	for i, e := range elems {
		if string(e) == "null" {
			continue
		}
		var w wireOpResult
		if err := json.Unmarshal(e, &w); err != nil {
			return nil, fmt.Errorf("%w: result %d: %v", ErrMalformed, i, err)
		}
		if w.Error != nil {
			oe := &OpError{Index: i, Err: *w.Error, Details: w.Details}
			if i < len(ops) {
				oe.Op, oe.Table = ops[i].Op, ops[i].Table
			} else {
				oe.Op = "commit"
			}
			return nil, oe
		}
		if i >= len(ops) {
			return nil, fmt.Errorf("%w: %d results for %d operations", ErrMalformed, len(elems), len(ops))
		}
		r := &out[i]
		if w.UUID != nil {
			v, err := decodeValue(w.UUID)
			if err != nil {
				return nil, fmt.Errorf("result %d uuid: %w", i, err)
			}
			u, ok := v.(UUID)
			if !ok {
				return nil, fmt.Errorf("%w: result %d uuid: got %s", ErrMalformed, i, kindOf(v))
			}
			r.UUID = u
		}
		if w.Rows != nil {
			r.Rows = make([]Row, len(w.Rows))
			for j, rr := range w.Rows {
				row, err := decodeRow(rr)
				if err != nil {
					return nil, fmt.Errorf("result %d row %d: %w", i, j, err)
				}
				r.Rows[j] = row
			}
		}
		if w.Count != nil {
			r.Count = *w.Count
		}
	}
	if len(elems) < len(ops) {
		return nil, fmt.Errorf("%w: %d results for %d operations", ErrMalformed, len(elems), len(ops))
	}
	return out, nil
}
