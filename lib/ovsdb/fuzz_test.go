package ovsdb

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
)

// FuzzDecodeValue round-trips <value>s: decode, encode, decode, compare.
func FuzzDecodeValue(f *testing.F) {
	for _, tc := range valueCases {
		f.Add([]byte(tc.json))
	}
	for _, s := range []string{
		`["set",["a","a"]]`, `["map",[["k",1],["k",2]]]`, `["uuid","x"]`, `1e400`, `-0`, `-0.0`,
		`["map",[[0.0,1],[-0.0,2]]]`, `"\ud800"`, "\"\xff\"", `["set",[1,1.0]]`, `[]`, `{}`, `null`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := DecodeValue(data)
		if err != nil {
			return
		}
		enc, err := EncodeValue(v)
		if err != nil {
			t.Fatalf("decoded %q to %#v, which does not encode: %v", data, v, err)
		}
		v2, err := DecodeValue(enc)
		if err != nil {
			t.Fatalf("re-decoding %s: %v", enc, err)
		}
		if !reflect.DeepEqual(v, v2) {
			t.Fatalf("round trip of %q: %#v != %#v (via %s)", data, v, v2, enc)
		}
		enc2, err := EncodeValue(v2)
		if err != nil || !bytes.Equal(enc, enc2) {
			t.Fatalf("encoding not stable: %s vs %s (%v)", enc, enc2, err)
		}
	})
}

// FuzzDecodeTableUpdates round-trips <table-updates> (and so <row>s), and
// feeds every decoded row to the typed row decoders, which must not panic.
func FuzzDecodeTableUpdates(f *testing.F) {
	f.Add([]byte(`{"Interface":{"` + exampleUUID + `":{"new":` + interfaceRowJSON + `}}}`))
	f.Add([]byte(`{"Interface":{"` + exampleUUID + `":{"old":{"ofport":["set",[]]},"new":{"name":"p1","ofport":5}}}}`))
	f.Add([]byte(`{"Bridge":{"` + exampleUUID + `":{"old":{"name":"br0","ports":["uuid","` + exampleUUID + `"]}}}}`))
	f.Add([]byte(`{"Open_vSwitch":{"` + exampleUUID + `":{"new":{"bridges":["set",[]],"next_cfg":1,"ovs_version":"3.1.0"}}}}`))
	f.Add([]byte(`{"Port":{"` + exampleUUID + `":{"new":{"name":"p","tag":["set",[7]],"interfaces":["set",[]]}}},"Controller":{}}`))
	f.Add([]byte(`{"Interface":{"x":{}}}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		tu, err := DecodeTableUpdates(data)
		if err != nil {
			return
		}
		for _, rows := range tu {
			for id, ru := range rows {
				for _, r := range []Row{ru.Old, ru.New} {
					_, _ = OpenvSwitchFromRow(id, r)
					_, _ = BridgeFromRow(id, r)
					_, _ = PortFromRow(id, r)
					_, _ = InterfaceFromRow(id, r)
					_, _ = ControllerFromRow(id, r)
				}
			}
		}
		enc, err := tu.MarshalJSON()
		if err != nil {
			t.Fatalf("decoded %q, which does not encode: %v", data, err)
		}
		tu2, err := DecodeTableUpdates(enc)
		if err != nil {
			t.Fatalf("re-decoding %s: %v", enc, err)
		}
		if !reflect.DeepEqual(tu, tu2) {
			t.Fatalf("round trip of %q: %#v != %#v", data, tu, tu2)
		}
	})
}

// FuzzTransactResult feeds arbitrary transact replies to the result parser,
// which must return results or an error, never panic.
func FuzzTransactResult(f *testing.F) {
	f.Add([]byte(`[{"uuid":["uuid","` + exampleUUID + `"]},{"rows":[{"name":"br0"}]},{"count":1}]`))
	f.Add([]byte(`[{"uuid":["uuid","` + exampleUUID + `"]},{"error":"constraint violation","details":"x"},null]`))
	f.Add([]byte(`[{},{},{},{"error":"referential integrity violation"}]`))
	f.Add([]byte(`[null,null,null,null,null]`))
	f.Add([]byte(`{"error":"x"}`))
	ops := []Operation{Insert("Interface", Row{}, "i"), Select("Bridge", nil), Mutate("Bridge", nil)}
	f.Fuzz(func(t *testing.T, data []byte) {
		res, err := parseTransactResult(data, ops)
		if err == nil && len(res) != len(ops) {
			t.Fatalf("%d results for %d ops without error", len(res), len(ops))
		}
	})
}

// FuzzLockMessages feeds the lock's reply and notifications anything: an
// error is ErrMalformed, never a panic, and a notification acts only on
// the lock it names.
func FuzzLockMessages(f *testing.F) {
	const lockName = "nodeflow_agent"
	for _, s := range []string{`{"locked":true}`, `{"locked":false}`, `{}`, `{"locked":1}`, `["nodeflow_agent"]`,
		`["other"]`, `[]`, `["a","b"]`, `[1]`, `null`, `"x"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if _, err := parseLockReply(data); err != nil && !errors.Is(err, ErrMalformed) {
			t.Fatalf("lock reply %q: %v", data, err)
		}
		for _, method := range []string{"locked", "stolen"} {
			l := newLock(lockName)
			c := &Client{locks: map[string]*Lock{lockName: l}}
			err := c.onLockNotify(method, data)
			if err != nil && !errors.Is(err, ErrMalformed) {
				t.Fatalf("%s %q: %v", method, data, err)
			}
			var p []string
			named := json.Unmarshal(data, &p) == nil && len(p) == 1 && p[0] == lockName
			if held, lost := l.state(); (held || lost) != named || (method == "locked" && lost) || (method == "stolen" && held) {
				t.Fatalf("%s %q: held %v, lost %v", method, data, held, lost)
			}
		}
	})
}
