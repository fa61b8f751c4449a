package ovsdb

import (
	"encoding/json"
	"fmt"
)

// Schema is a database schema (RFC 7047 section 3.2), as get_schema returns it.
type Schema struct {
	Name    string                 `json:"name"`
	Version string                 `json:"version"`
	Tables  map[string]TableSchema `json:"tables"`
}

// TableSchema describes one table.
type TableSchema struct {
	Columns map[string]ColumnSchema `json:"columns"`
	MaxRows int                     `json:"maxRows,omitempty"`
	IsRoot  bool                    `json:"isRoot,omitempty"`
	Indexes [][]string              `json:"indexes,omitempty"`
}

// ColumnSchema describes one column.
type ColumnSchema struct {
	Type      ColumnType `json:"type"`
	Ephemeral bool       `json:"ephemeral,omitempty"`
	// Mutable is nil when the schema does not say (columns are mutable by default).
	Mutable *bool `json:"mutable,omitempty"`
}

// ColumnType is a <type>: a key type, an optional value type (for maps), and
// the bounds on the number of elements. Max is -1 for "unlimited".
type ColumnType struct {
	Key   BaseType
	Value *BaseType
	Min   int
	Max   int
}

// BaseType is a <base-type>: an atomic type with optional constraints.
type BaseType struct {
	// Type is "integer", "real", "boolean", "string" or "uuid".
	Type string
	// Enum lists the allowed values, when constrained.
	Enum []any
	// MinInteger, MaxInteger, MinReal, MaxReal, MinLength and MaxLength are
	// nil when unconstrained.
	MinInteger, MaxInteger *int64
	MinReal, MaxReal       *float64
	MinLength, MaxLength   *int64
	// RefTable and RefType ("strong" or "weak") for uuid references.
	RefTable string
	RefType  string
}

// ParseSchema decodes a <database-schema>.
func ParseSchema(b []byte) (*Schema, error) {
	var s Schema
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("ovsdb: schema: %w: %v", ErrMalformed, err)
	}
	if s.Name == "" {
		return nil, fmt.Errorf("ovsdb: schema: %w: no name", ErrMalformed)
	}
	return &s, nil
}

// Column returns the schema of table.column.
func (s *Schema) Column(table, column string) (ColumnSchema, bool) {
	t, ok := s.Tables[table]
	if !ok {
		return ColumnSchema{}, false
	}
	c, ok := t.Columns[column]
	return c, ok
}

// UnmarshalJSON decodes a <type>: either an atomic-type string or an object
// {"key": ..., "value": ..., "min": ..., "max": ...}.
func (t *ColumnType) UnmarshalJSON(b []byte) error {
	var atomic string
	if json.Unmarshal(b, &atomic) == nil {
		*t = ColumnType{Key: BaseType{Type: atomic}, Min: 1, Max: 1}
		return t.Key.validate()
	}
	var w struct {
		Key   json.RawMessage `json:"key"`
		Value json.RawMessage `json:"value"`
		Min   *int            `json:"min"`
		Max   json.RawMessage `json:"max"`
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return fmt.Errorf("type: %w", err)
	}
	if w.Key == nil {
		return fmt.Errorf("type: %w: no key", ErrMalformed)
	}
	*t = ColumnType{Min: 1, Max: 1}
	if err := json.Unmarshal(w.Key, &t.Key); err != nil {
		return fmt.Errorf("type key: %w", err)
	}
	if w.Value != nil {
		t.Value = new(BaseType)
		if err := json.Unmarshal(w.Value, t.Value); err != nil {
			return fmt.Errorf("type value: %w", err)
		}
	}
	if w.Min != nil {
		t.Min = *w.Min
	}
	if w.Max != nil {
		var unlimited string
		if json.Unmarshal(w.Max, &unlimited) == nil {
			if unlimited != "unlimited" {
				return fmt.Errorf("type max: %w: %q", ErrMalformed, unlimited)
			}
			t.Max = -1
		} else if err := json.Unmarshal(w.Max, &t.Max); err != nil {
			return fmt.Errorf("type max: %w", err)
		}
	}
	return nil
}

// UnmarshalJSON decodes a <base-type>: an atomic-type string or an object.
func (bt *BaseType) UnmarshalJSON(b []byte) error {
	var atomic string
	if json.Unmarshal(b, &atomic) == nil {
		*bt = BaseType{Type: atomic}
		return bt.validate()
	}
	var w struct {
		Type       string          `json:"type"`
		Enum       json.RawMessage `json:"enum"`
		MinInteger *int64          `json:"minInteger"`
		MaxInteger *int64          `json:"maxInteger"`
		MinReal    *float64        `json:"minReal"`
		MaxReal    *float64        `json:"maxReal"`
		MinLength  *int64          `json:"minLength"`
		MaxLength  *int64          `json:"maxLength"`
		RefTable   string          `json:"refTable"`
		RefType    string          `json:"refType"`
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*bt = BaseType{Type: w.Type, MinInteger: w.MinInteger, MaxInteger: w.MaxInteger,
		MinReal: w.MinReal, MaxReal: w.MaxReal, MinLength: w.MinLength, MaxLength: w.MaxLength,
		RefTable: w.RefTable, RefType: w.RefType}
	if w.RefTable != "" && w.RefType == "" {
		bt.RefType = "strong"
	}
	if w.Enum != nil {
		v, err := decodeValue(w.Enum)
		if err != nil {
			return fmt.Errorf("enum: %w", err)
		}
		if s, ok := v.(Set); ok {
			bt.Enum = s
		} else {
			bt.Enum = []any{v}
		}
	}
	return bt.validate()
}

func (bt *BaseType) validate() error {
	switch bt.Type {
	case "integer", "real", "boolean", "string", "uuid":
		return nil
	}
	return fmt.Errorf("%w: atomic type %q", ErrMalformed, bt.Type)
}
