package ovsdb

import (
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
)

const exampleUUID = "550e8400-e29b-41d4-a716-446655440000" // RFC 7047's example uuid

// The notation of RFC 7047 section 5.1, one case per production.
var valueCases = []struct {
	name string
	json string
	want any
	// enc is the canonical encoding when it differs from json.
	enc string
}{
	{name: "string atom", json: `"hello"`, want: "hello"},
	{name: "empty string", json: `""`, want: ""},
	{name: "integer atom", json: `42`, want: int64(42)},
	{name: "negative integer", json: `-9223372036854775808`, want: int64(-9223372036854775808)},
	{name: "largest integer", json: `9223372036854775807`, want: int64(9223372036854775807)},
	{name: "real atom", json: `1.5`, want: 1.5},
	{name: "real with exponent", json: `1e3`, want: 1000.0, enc: `1000.0`},
	{name: "real that looks integral", json: `2.0`, want: 2.0},
	{name: "boolean true", json: `true`, want: true},
	{name: "boolean false", json: `false`, want: false},
	{name: "uuid", json: `["uuid","` + exampleUUID + `"]`, want: UUID(exampleUUID)},
	{name: "named-uuid", json: `["named-uuid","myrow"]`, want: NamedUUID("myrow")},
	{name: "named-uuid with underscore", json: `["named-uuid","_row_1"]`, want: NamedUUID("_row_1")},
	{name: "empty set", json: `["set",[]]`, want: Set{}},
	{name: "set of integers", json: `["set",[1,2,3]]`, want: Set{int64(1), int64(2), int64(3)}},
	{name: "set of strings", json: `["set",["OpenFlow13","OpenFlow15"]]`, want: Set{"OpenFlow13", "OpenFlow15"}},
	{name: "set of uuids", json: `["set",[["uuid","` + exampleUUID + `"],["named-uuid","p"]]]`,
		want: Set{UUID(exampleUUID), NamedUUID("p")}},
	{name: "one-element set as bare atom", json: `"secure"`, want: "secure"},
	{name: "one-element set in set form", json: `["set",["secure"]]`, want: Set{"secure"}},
	{name: "empty map", json: `["map",[]]`, want: Map{}},
	{name: "string map", json: `["map",[["iface-id","pod1"],["attached-mac","0a:58:0a:80:00:05"]]]`,
		want: Map{"iface-id": "pod1", "attached-mac": "0a:58:0a:80:00:05"},
		enc:  `["map",[["attached-mac","0a:58:0a:80:00:05"],["iface-id","pod1"]]]`},
	{name: "integer to uuid map", json: `["map",[[0,["uuid","` + exampleUUID + `"]]]]`,
		want: Map{int64(0): UUID(exampleUUID)}},
	{name: "string to integer map", json: `["map",[["rx_packets",10],["tx_packets",0]]]`,
		want: Map{"rx_packets": int64(10), "tx_packets": int64(0)}},
	{name: "string with escapes", json: `"a\"b\\c\u00e9"`, want: "a\"b\\cé", enc: `"a\"b\\cé"`},
}

func TestDecodeValue(t *testing.T) {
	for _, tc := range valueCases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodeValue([]byte(tc.json))
			if err != nil {
				t.Fatalf("DecodeValue(%s): %v", tc.json, err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("DecodeValue(%s) = %#v, want %#v", tc.json, got, tc.want)
			}
		})
	}
}

func TestEncodeValue(t *testing.T) {
	for _, tc := range valueCases {
		t.Run(tc.name, func(t *testing.T) {
			want := tc.enc
			if want == "" {
				want = tc.json
			}
			got, err := EncodeValue(tc.want)
			if err != nil {
				t.Fatalf("EncodeValue(%#v): %v", tc.want, err)
			}
			if string(got) != want {
				t.Fatalf("EncodeValue(%#v) = %s, want %s", tc.want, got, want)
			}
			back, err := DecodeValue(got)
			if err != nil || !reflect.DeepEqual(back, tc.want) {
				t.Fatalf("round trip of %s = %#v, %v", got, back, err)
			}
		})
	}
}

func TestEncodePlainGoForms(t *testing.T) {
	cases := []struct {
		name string
		in   any
		want string
	}{
		{"int", 7, `7`},
		{"string slice", []string{"b", "a"}, `["set",["b","a"]]`},
		{"uuid slice", []UUID{exampleUUID}, `["set",[["uuid","` + exampleUUID + `"]]]`},
		{"string map", map[string]string{"b": "2", "a": "1"}, `["map",[["a","1"],["b","2"]]]`},
		{"integer map", map[string]int64{"x": 1}, `["map",[["x",1]]]`},
		{"map keys of mixed types sort by type", Map{"s": 1, int64(2): 3, true: 4}, `["map",[[true,4],[2,3],["s",1]]]`},
		{"row", Row{"name": "br0", "ports": Set{}}, `{"name":"br0","ports":["set",[]]}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got []byte
			var err error
			if r, ok := tc.in.(Row); ok {
				got, err = r.MarshalJSON()
			} else {
				got, err = EncodeValue(tc.in)
			}
			if err != nil || string(got) != tc.want {
				t.Fatalf("got %s, %v; want %s", got, err, tc.want)
			}
		})
	}
}

func TestDecodeValueErrors(t *testing.T) {
	cases := []struct {
		name, json, want string
	}{
		{"not json", `[`, "invalid JSON"},
		{"trailing data", `1 2`, "trailing data"},
		{"null", `null`, "want an atom, got null"},
		{"object", `{"a":1}`, "want an atom, got an object"},
		{"bad uuid", `["uuid","not-a-uuid"]`, `uuid "not-a-uuid": not in 8-4-4-4-12 hex form`},
		{"uuid with wrong dashes", `["uuid","550e8400e-29b-41d4-a716-446655440000"]`, "not in 8-4-4-4-12"},
		{"uuid not a string", `["uuid",5]`, "uuid: want a string, got a number"},
		{"bad named-uuid", `["named-uuid","1abc"]`, "not an <id>"},
		{"unknown tag", `["list",[1]]`, `unknown value tag "list"`},
		{"three-element array", `["set",[],1]`, "2-element"},
		{"tag not a string", `[1,2]`, "tag is a number"},
		{"set body not array", `["set",1]`, "set: want an array"},
		{"nested set", `["set",[["set",[]]]]`, `set element 0: `},
		{"set of maps", `["set",[["map",[]]]]`, `atom tag "map"`},
		{"duplicate set element", `["set",["a","a"]]`, `set element 1: duplicate "a"`},
		{"duplicate uuid in set", `["set",[["uuid","` + exampleUUID + `"],["uuid","` + exampleUUID + `"]]]`, "duplicate uuid"},
		{"map pair not a pair", `["map",[[1]]]`, "map pair 0: want [key, value]"},
		{"map value a set", `["map",[["k",["set",[]]]]]`, "map pair 0 value"},
		{"duplicate map key", `["map",[["k","a"],["k","b"]]]`, `duplicate key "k"`},
		{"integer out of range", `9223372036854775808`, "out of 64-bit range"},
		{"real out of range", `1e400`, "real 1e400 out of range"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeValue([]byte(tc.json))
			if err == nil {
				t.Fatalf("DecodeValue(%s) succeeded", tc.json)
			}
			if !errors.Is(err, ErrMalformed) {
				t.Errorf("error %v does not wrap ErrMalformed", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not contain %q", err, tc.want)
			}
		})
	}
}

func TestEncodeValueErrors(t *testing.T) {
	cases := []struct {
		name string
		in   any
		want string
	}{
		{"bad uuid", UUID("x"), `uuid "x"`},
		{"bad named uuid", NamedUUID("a-b"), `named-uuid "a-b"`},
		{"unsupported type", struct{}{}, "struct {} is not an OVSDB atom"},
		{"set containing a set", Set{Set{}}, "set element 0"},
		{"nil", nil, "<nil> is not an OVSDB atom"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := EncodeValue(tc.in)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("EncodeValue(%#v) error %v, want it to contain %q", tc.in, err, tc.want)
			}
		})
	}
}

func TestConverters(t *testing.T) {
	u := UUID(exampleUUID)
	t.Run("optional string, bare atom", func(t *testing.T) {
		if s, err := OptionalString("secure"); err != nil || s != "secure" {
			t.Fatalf("got %q, %v", s, err)
		}
	})
	t.Run("optional string, empty set", func(t *testing.T) {
		if s, err := OptionalString(Set{}); err != nil || s != "" {
			t.Fatalf("got %q, %v", s, err)
		}
	})
	t.Run("optional string, two elements", func(t *testing.T) {
		if _, err := OptionalString(Set{"a", "b"}); err == nil {
			t.Fatal("no error")
		}
	})
	t.Run("optional integer", func(t *testing.T) {
		n, ok, err := OptionalInteger(Set{int64(5)})
		if err != nil || !ok || n != 5 {
			t.Fatalf("got %d %v %v", n, ok, err)
		}
		if _, ok, err := OptionalInteger(Set{}); ok || err != nil {
			t.Fatalf("empty: got %v %v", ok, err)
		}
		if n, ok, err := OptionalInteger(int64(-1)); err != nil || !ok || n != -1 {
			t.Fatalf("bare: got %d %v %v", n, ok, err)
		}
	})
	t.Run("uuid set from bare uuid", func(t *testing.T) {
		got, err := UUIDSet(u)
		if err != nil || !reflect.DeepEqual(got, []UUID{u}) {
			t.Fatalf("got %v, %v", got, err)
		}
	})
	t.Run("uuid set with a string", func(t *testing.T) {
		if _, err := UUIDSet(Set{u, "x"}); err == nil || !strings.Contains(err.Error(), "set element 1: want a uuid, got string") {
			t.Fatalf("error %v", err)
		}
	})
	t.Run("string map with integer values", func(t *testing.T) {
		if _, err := StringMap(Map{"a": int64(1)}); err == nil || !strings.Contains(err.Error(), `map entry "a"`) {
			t.Fatalf("error %v", err)
		}
	})
	t.Run("string set sorted and unique", func(t *testing.T) {
		got := MakeStringSet("b", "a", "b")
		if !reflect.DeepEqual(got, Set{"a", "b"}) {
			t.Fatalf("got %v", got)
		}
	})
}

// An Interface row as ovsdb-server sends it in a monitor update.
const interfaceRowJSON = `{
	"name": "vxlan0",
	"type": "vxlan",
	"options": ["map", [["key", "flow"], ["remote_ip", "flow"]]],
	"ofport": 3,
	"ofport_request": ["set", []],
	"mtu_request": ["set", []],
	"mtu": ["set", []],
	"error": ["set", []],
	"mac_in_use": "fe:41:5c:ad:70:11",
	"ifindex": 0,
	"link_state": "up",
	"admin_state": "up",
	"external_ids": ["map", [["owner", "nodeflow"]]],
	"other_config": ["map", []]
}`

func TestInterfaceFromRow(t *testing.T) {
	row, err := DecodeRow([]byte(interfaceRowJSON))
	if err != nil {
		t.Fatal(err)
	}
	got, err := InterfaceFromRow(exampleUUID, row)
	if err != nil {
		t.Fatal(err)
	}
	want := Interface{
		UUID: exampleUUID, Name: "vxlan0", Type: "vxlan",
		Options: map[string]string{"key": "flow", "remote_ip": "flow"},
		Ofport:  3, MACInUse: "fe:41:5c:ad:70:11", LinkState: "up", AdminState: "up",
		ExternalIDs: map[string]string{"owner": "nodeflow"}, OtherConfig: map[string]string{},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %+v\nwant %+v", got, want)
	}

	t.Run("failed interface", func(t *testing.T) {
		row, err := DecodeRow([]byte(`{"name":"eth9","ofport":-1,"error":"could not open network device eth9 (No such device)"}`))
		if err != nil {
			t.Fatal(err)
		}
		got, err := InterfaceFromRow(exampleUUID, row)
		if err != nil || got.Ofport != -1 || !strings.Contains(got.Error, "No such device") {
			t.Fatalf("got %+v, %v", got, err)
		}
	})
	t.Run("uuid from _uuid column", func(t *testing.T) {
		got, err := InterfaceFromRow("", Row{"_uuid": UUID(exampleUUID), "name": "p"})
		if err != nil || got.UUID != exampleUUID {
			t.Fatalf("got %+v, %v", got, err)
		}
	})
	t.Run("wrong type names the column", func(t *testing.T) {
		_, err := InterfaceFromRow(exampleUUID, Row{"name": "p", "ofport": "three"})
		if err == nil || !strings.Contains(err.Error(), "Interface row "+exampleUUID+": column ofport: malformed: want an integer, got string") {
			t.Fatalf("error %v", err)
		}
	})
}

func TestBridgeFromRow(t *testing.T) {
	row, err := DecodeRow([]byte(`{
		"_uuid": ["uuid","` + exampleUUID + `"],
		"name": "br0",
		"ports": ["uuid","11111111-2222-3333-4444-555555555555"],
		"datapath_type": "netdev",
		"fail_mode": "secure",
		"protocols": ["set",["OpenFlow13","OpenFlow15"]],
		"other_config": ["map",[["datapath-id","0000000000000001"]]],
		"external_ids": ["map",[]]
	}`))
	if err != nil {
		t.Fatal(err)
	}
	got, err := BridgeFromRow("", row)
	if err != nil {
		t.Fatal(err)
	}
	want := Bridge{
		UUID: exampleUUID, Name: "br0", Ports: []UUID{"11111111-2222-3333-4444-555555555555"},
		DatapathType: "netdev", FailMode: "secure", Protocols: []string{"OpenFlow13", "OpenFlow15"},
		OtherConfig: map[string]string{"datapath-id": "0000000000000001"}, ExternalIDs: map[string]string{},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %+v\nwant %+v", got, want)
	}
}

func TestOtherRowsFromRow(t *testing.T) {
	ovs, err := OpenvSwitchFromRow(exampleUUID, Row{"bridges": Set{}, "ovs_version": "3.1.0", "next_cfg": int64(4), "cur_cfg": int64(4)})
	if err != nil || ovs.OVSVersion != "3.1.0" || ovs.NextCfg != 4 || len(ovs.Bridges) != 0 {
		t.Fatalf("Open_vSwitch: %+v, %v", ovs, err)
	}
	p, err := PortFromRow(exampleUUID, Row{"name": "p1", "interfaces": UUID(exampleUUID), "tag": Set{}})
	if err != nil || p.Name != "p1" || len(p.Interfaces) != 1 || p.Tag != 0 {
		t.Fatalf("Port: %+v, %v", p, err)
	}
	ctl, err := ControllerFromRow(exampleUUID, Row{"target": "unix:/x", "is_connected": true, "role": "master"})
	if err != nil || !ctl.IsConnected || ctl.Role != "master" {
		t.Fatalf("Controller: %+v, %v", ctl, err)
	}
	if _, err := ControllerFromRow(exampleUUID, Row{"is_connected": "yes"}); err == nil {
		t.Fatal("Controller with a string is_connected decoded")
	}
	if _, err := PortFromRow("", Row{"_uuid": "not a uuid"}); err == nil || !strings.Contains(err.Error(), "column _uuid") {
		t.Fatalf("Port with a bad _uuid: %v", err)
	}
}

func TestOperationEncoding(t *testing.T) {
	u := UUID(exampleUUID)
	cases := []struct {
		name string
		op   Operation
		want string
	}{
		{"insert with uuid-name", Insert("Port", Row{"name": "p1", "interfaces": MakeUUIDSet(NamedUUID("i"))}, "p"),
			`{"op":"insert","table":"Port","row":{"interfaces":["set",[["named-uuid","i"]]],"name":"p1"},"uuid-name":"p"}`},
		{"insert without uuid-name", Insert("Bridge", Row{}, ""), `{"op":"insert","table":"Bridge","row":{}}`},
		{"select all rows keeps where", Select("Open_vSwitch", nil), `{"op":"select","table":"Open_vSwitch","where":[]}`},
		{"select with columns", Select("Bridge", []Condition{Equal("name", "br0")}, "_uuid", "ports"),
			`{"op":"select","table":"Bridge","where":[["name","==","br0"]],"columns":["_uuid","ports"]}`},
		{"update", Update("Bridge", []Condition{Equal("_uuid", u)}, Row{"fail_mode": "secure"}),
			`{"op":"update","table":"Bridge","where":[["_uuid","==",["uuid","` + exampleUUID + `"]]],"row":{"fail_mode":"secure"}}`},
		{"mutate", Mutate("Bridge", []Condition{Equal("name", "br0")}, DeleteMutation("external_ids", MakeStringSet("a")), InsertMutation("external_ids", Map{"a": "1"})),
			`{"op":"mutate","table":"Bridge","where":[["name","==","br0"]],"mutations":[["external_ids","delete",["set",["a"]]],["external_ids","insert",["map",[["a","1"]]]]]}`},
		{"delete", Delete("Port", []Condition{NotEqual("name", "x"), Includes("interfaces", u)}),
			`{"op":"delete","table":"Port","where":[["name","!=","x"],["interfaces","includes",["uuid","` + exampleUUID + `"]]]}`},
		{"wait for absence", Wait("Bridge", []Condition{Equal("name", "br0")}, []string{"name"}, "==", nil, 0),
			`{"op":"wait","table":"Bridge","where":[["name","==","br0"]],"columns":["name"],"until":"==","rows":[],"timeout":0}`},
		{"comment", Comment(`say "hi"`), `{"op":"comment","comment":"say \"hi\""}`},
		{"commit", Operation{Op: "commit", Durable: true}, `{"op":"commit","durable":true}`},
		{"abort", Operation{Op: "abort"}, `{"op":"abort"}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.op.MarshalJSON()
			if err != nil || string(got) != tc.want {
				t.Fatalf("got  %s, %v\nwant %s", got, err, tc.want)
			}
		})
	}
	bad := []struct {
		name string
		op   Operation
		want string
	}{
		{"insert without table", Insert("", Row{}, ""), "no table"},
		{"bad uuid-name", Insert("Port", Row{}, "a-b"), `uuid-name "a-b"`},
		{"bad value in row", Insert("Port", Row{"name": 1.5i}, ""), "row: column name"},
		{"bad until", Wait("Port", nil, nil, "<", nil, 0), `until "<"`},
		{"unknown op", Operation{Op: "frobnicate"}, `unknown operation "frobnicate"`},
		{"bad where value", Select("Port", []Condition{Equal("name", struct{}{})}), "where 0 (name)"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.op.MarshalJSON()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestParseTransactResult(t *testing.T) {
	ops := []Operation{
		Insert("Interface", Row{"name": "p"}, "i"),
		Insert("Port", Row{"name": "p"}, "p"),
		Select("Bridge", nil),
	}
	t.Run("success", func(t *testing.T) {
		res, err := parseTransactResult([]byte(`[{"uuid":["uuid","`+exampleUUID+`"]},{"uuid":["uuid","`+exampleUUID+`"]},{"rows":[{"name":"br0"}]}]`), ops)
		if err != nil || res[0].UUID != exampleUUID || len(res[2].Rows) != 1 || res[2].Rows[0]["name"] != "br0" {
			t.Fatalf("got %+v, %v", res, err)
		}
	})
	t.Run("second op fails", func(t *testing.T) {
		_, err := parseTransactResult([]byte(`[{"uuid":["uuid","`+exampleUUID+`"]},{"error":"constraint violation","details":"Transaction causes multiple rows in \"Port\" table to have identical values (\"p\") for index on column \"name\"."},null]`), ops)
		var oe *OpError
		if !errors.As(err, &oe) || oe.Index != 1 || oe.Op != "insert" || oe.Table != "Port" || oe.Err != ErrStrConstraintViolation {
			t.Fatalf("got %#v", err)
		}
		if !strings.HasPrefix(err.Error(), `op 1 (insert Port): constraint violation: Transaction causes`) {
			t.Fatalf("message %q", err)
		}
	})
	t.Run("commit fails", func(t *testing.T) {
		_, err := parseTransactResult([]byte(`[{},{},{"rows":[]},{"error":"referential integrity violation","details":"cannot delete"}]`), ops)
		var oe *OpError
		if !errors.As(err, &oe) || oe.Index != 3 || oe.Op != "commit" {
			t.Fatalf("got %#v", err)
		}
		if err.Error() != "commit: referential integrity violation: cannot delete" {
			t.Fatalf("message %q", err)
		}
	})
	t.Run("too few results", func(t *testing.T) {
		if _, err := parseTransactResult([]byte(`[{}]`), ops); err == nil || !strings.Contains(err.Error(), "1 results for 3 operations") {
			t.Fatalf("error %v", err)
		}
	})
	t.Run("too many results", func(t *testing.T) {
		if _, err := parseTransactResult([]byte(`[{},{},{},{}]`), ops); err == nil || !strings.Contains(err.Error(), "4 results for 3 operations") {
			t.Fatalf("error %v", err)
		}
	})
	t.Run("not an array", func(t *testing.T) {
		if _, err := parseTransactResult([]byte(`{}`), ops); !errors.Is(err, ErrMalformed) {
			t.Fatalf("error %v", err)
		}
	})
	t.Run("bad row", func(t *testing.T) {
		if _, err := parseTransactResult([]byte(`[{},{},{"rows":[{"a":["uuid","x"]}]}]`), ops); err == nil || !strings.Contains(err.Error(), "result 2 row 0: column a: malformed: uuid \"x\"") {
			t.Fatalf("error %v", err)
		}
	})
}

func TestDecodeTableUpdates(t *testing.T) {
	// A modification, an insertion and a deletion, as RFC 7047 section 4.1.6 describes.
	in := `{"Interface":{
		"` + exampleUUID + `":{"old":{"ofport":["set",[]]},"new":{"name":"p1","ofport":5}},
		"11111111-2222-3333-4444-555555555555":{"new":{"name":"p2","ofport":["set",[]]}},
		"66666666-7777-8888-9999-000000000000":{"old":{"name":"p3","ofport":7}}}}`
	tu, err := DecodeTableUpdates([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	rows := tu["Interface"]
	if len(rows) != 3 {
		t.Fatalf("got %d rows", len(rows))
	}
	if ru := rows[exampleUUID]; ru.New["ofport"] != int64(5) || !reflect.DeepEqual(ru.Old["ofport"], Set{}) {
		t.Fatalf("modify: %+v", ru)
	}
	if ru := rows["66666666-7777-8888-9999-000000000000"]; ru.New != nil || ru.Old["name"] != "p3" {
		t.Fatalf("delete: %+v", ru)
	}
	enc, err := tu.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeTableUpdates(enc)
	if err != nil || !reflect.DeepEqual(back, tu) {
		t.Fatalf("round trip: %v\n%s", err, enc)
	}

	bad := []struct{ name, json, want string }{
		{"not an object", `[]`, "want an object, got an array"},
		{"table not an object", `{"Interface":1}`, "table Interface: malformed: want an object"},
		{"row key not a uuid", `{"Interface":{"x":{"new":{}}}}`, `row key "x" is not a uuid`},
		{"row update not an object", `{"Interface":{"` + exampleUUID + `":[]}}`, "Interface row " + exampleUUID},
		{"neither old nor new", `{"Interface":{"` + exampleUUID + `":{}}}`, "neither old nor new"},
		{"unknown member", `{"Interface":{"` + exampleUUID + `":{"mid":{}}}}`, `unknown member "mid"`},
		{"bad value", `{"Interface":{"` + exampleUUID + `":{"new":{"ofport":["set",[1,1]]}}}}`, "Interface row " + exampleUUID + " new: column ofport: malformed: set element 1: duplicate 1"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeTableUpdates([]byte(tc.json))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestParseSchema(t *testing.T) {
	b, err := os.ReadFile("/usr/share/openvswitch/vswitch.ovsschema")
	if err != nil {
		if os.Getenv("NODEFLOW_REQUIRE_OVS") != "" {
			t.Fatalf("Open_vSwitch schema not installed and NODEFLOW_REQUIRE_OVS is set: %v", err)
		}
		t.Skipf("Open_vSwitch schema not installed: %v", err)
	}
	s, err := ParseSchema(b)
	if err != nil {
		t.Fatal(err)
	}
	if s.Name != "Open_vSwitch" || !s.Tables["Open_vSwitch"].IsRoot || s.Tables["Open_vSwitch"].MaxRows != 1 {
		t.Fatalf("schema header: %s %+v", s.Name, s.Tables["Open_vSwitch"])
	}
	fm, ok := s.Column("Bridge", "fail_mode")
	if !ok || fm.Type.Min != 0 || fm.Type.Max != 1 || !reflect.DeepEqual(fm.Type.Key.Enum, []any{"standalone", "secure"}) {
		t.Fatalf("Bridge.fail_mode: %+v", fm)
	}
	ports, _ := s.Column("Bridge", "ports")
	if ports.Type.Key.Type != "uuid" || ports.Type.Key.RefTable != "Port" || ports.Type.Key.RefType != "strong" || ports.Type.Max != -1 {
		t.Fatalf("Bridge.ports: %+v", ports.Type)
	}
	req, _ := s.Column("Interface", "ofport_request")
	if req.Type.Key.MinInteger == nil || *req.Type.Key.MinInteger != 1 || *req.Type.Key.MaxInteger != 65279 {
		t.Fatalf("Interface.ofport_request: %+v", req.Type.Key)
	}
	name, _ := s.Column("Port", "name")
	if name.Mutable == nil || *name.Mutable || name.Type.Key.Type != "string" || name.Type.Min != 1 {
		t.Fatalf("Port.name: %+v", name)
	}
	opts, _ := s.Column("Interface", "options")
	if opts.Type.Value == nil || opts.Type.Value.Type != "string" {
		t.Fatalf("Interface.options: %+v", opts.Type)
	}
	if _, err := ParseSchema([]byte(`{"name":"x","tables":{"T":{"columns":{"c":{"type":"blob"}}}}}`)); err == nil || !strings.Contains(err.Error(), `atomic type "blob"`) {
		t.Fatalf("bad atomic type: %v", err)
	}
}
