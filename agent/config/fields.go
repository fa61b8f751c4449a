package config

import (
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// Type is what a feature's field holds.
type Type int

// The types of a feature's field.
const (
	// Bool is true or false.
	Bool Type = iota
	// String is a string.
	String
	// List is a list of strings; the flag takes them comma-separated,
	// and an empty list sets it empty.
	List
	// Object is an object of Fields, each setting its own flag.
	Object
)

// Field is one field of the file that a feature declares (the feature
// list's entries do): the file's field, the flag it sets, and what it
// holds. The agent's own fields are AgentConfiguration's.
type Field struct {
	// Name is the field's name in the file ("unidleHoldTime").
	Name string
	// Flag is the flag it sets, without dashes; none for an Object.
	Flag string
	// Type is what it holds.
	Type Type
	// Check, when set, checks a String's value, or each value of a List:
	// it says what is wrong with it ("is not a CIDR"), or "".
	Check func(string) string
	// Fields are an Object's fields.
	Fields []Field
}

// CIDR is a Check: s is a CIDR.
func CIDR(s string) string {
	if _, err := netip.ParsePrefix(s); err != nil {
		return "is not a CIDR"
	}
	return ""
}

// PositiveDuration is a Check: s is a positive Go duration.
func PositiveDuration(s string) string {
	if d, err := time.ParseDuration(s); err != nil || d <= 0 {
		return "is not a positive duration (like 60s)"
	}
	return ""
}

// checkValue checks the value s of field with check.
func checkValue(field, s string, check func(string) string) error {
	if what := check(s); what != "" {
		return fmt.Errorf("%s: %q %s", field, s, what)
	}
	return nil
}

// checkList checks each value of the list field with check.
func checkList(field string, ss []string, check func(string) string) error {
	var errs []error
	for i, s := range ss {
		if what := check(s); what != "" {
			errs = append(errs, fmt.Errorf("%s[%d]: %q %s", field, i, s, what))
		}
	}
	return errors.Join(errs...)
}

// goType is the Go type f decodes into: a pointer or a slice, nil when
// the file leaves the field out.
func (f Field) goType() (reflect.Type, error) {
	switch f.Type {
	case Bool:
		return reflect.TypeFor[*bool](), nil
	case String:
		return reflect.TypeFor[*string](), nil
	case List:
		return reflect.TypeFor[[]string](), nil
	case Object:
		t, err := structOf(nil, f.Fields)
		if err != nil {
			return nil, fmt.Errorf("%s.%w", f.Name, err)
		}
		return reflect.PointerTo(t), nil
	}
	return nil, fmt.Errorf("%s: unknown type %d", f.Name, f.Type)
}

// structOf is a struct of the fields base has, then of fields, each named
// in JSON as it is in the file.
func structOf(base []reflect.StructField, fields []Field) (reflect.Type, error) {
	seen := map[string]bool{}
	sfs := base
	for _, sf := range base {
		name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
		seen[name] = true
	}
	for i, f := range fields {
		if f.Name == "" || seen[f.Name] {
			return nil, fmt.Errorf("field %q declared twice, or without a name", f.Name)
		}
		seen[f.Name] = true
		t, err := f.goType()
		if err != nil {
			return nil, err
		}
		sfs = append(sfs, reflect.StructField{Name: "Field" + strconv.Itoa(i), Type: t, Tag: reflect.StructTag(`json:"` + f.Name + `,omitempty"`)})
	}
	return reflect.StructOf(sfs), nil
}

// fileType is the Go type of the whole file: AgentConfiguration's
// exported fields, in their order, then fields.
func fileType(fields []Field) (reflect.Type, error) {
	own := reflect.TypeFor[AgentConfiguration]()
	var base []reflect.StructField
	for i := range own.NumField() {
		sf := own.Field(i)
		if !sf.IsExported() {
			// A field the file does not have: a placeholder keeps the
			// indexes of the two types the same.
			sf = reflect.StructField{Name: "Unexported" + strconv.Itoa(i), Type: reflect.TypeFor[struct{}](), Tag: `json:"-"`}
		}
		base = append(base, reflect.StructField{Name: sf.Name, Type: sf.Type, Tag: sf.Tag})
	}
	t, err := structOf(base, fields)
	if err != nil {
		return nil, fmt.Errorf("the features' fields: %w", err)
	}
	return t, nil
}

// settings checks f's value v (decoded into f.goType()), whose name in
// the file is prefix+f.Name, and adds the flags it sets to out.
func (f Field) settings(prefix string, v reflect.Value, out *[]Setting) error {
	if v.IsNil() {
		return nil
	}
	name := prefix + f.Name
	switch f.Type {
	case Bool:
		*out = append(*out, Setting{Flag: f.Flag, Field: name, Value: strconv.FormatBool(v.Elem().Bool())})
	case String:
		s := v.Elem().String()
		if f.Check != nil {
			if err := checkValue(name, s, f.Check); err != nil {
				return err
			}
		}
		*out = append(*out, Setting{Flag: f.Flag, Field: name, Value: s})
	case List:
		ss := v.Interface().([]string)
		if f.Check != nil {
			if err := checkList(name, ss, f.Check); err != nil {
				return err
			}
		}
		*out = append(*out, Setting{Flag: f.Flag, Field: name, Value: strings.Join(ss, ",")})
	case Object:
		var errs []error
		for i, sub := range f.Fields {
			errs = append(errs, sub.settings(name+".", v.Elem().Field(i), out))
		}
		return errors.Join(errs...)
	}
	return nil
}
