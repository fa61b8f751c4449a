package openflow

import (
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"sync"
	"testing"
)

// TestErrorNamesMatchOVS prints every error of the table with
// `ovs-ofctl ofp-print` in OF1.3 and OF1.5 and checks OVS gives it the same
// name.
func TestErrorNamesMatchOVS(t *testing.T) {
	type job struct {
		v    Version
		e    errorCodeEntry
		want string
	}
	var jobs []job
	for _, e := range errorCodes {
		for _, v := range []Version{Version13, Version14, Version15} {
			if v >= e.min && v <= e.max {
				jobs = append(jobs, job{v, e, e.name})
			}
		}
	}
	mcOfpPrint(t, []byte{4, 2, 0, 8, 0, 0, 0, 0}) // skips early without ovs-ofctl
	var mu sync.Mutex
	var failures []string
	var wg sync.WaitGroup
	ch := make(chan job)
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range ch {
				b, err := Marshal(j.v, 0, &OFError{Type: j.e.typ, Code: j.e.code, Experimenter: j.e.exp})
				if err != nil {
					panic(err)
				}
				first, _, _ := strings.Cut(mcOfpPrint(t, b), "\n")
				want := fmt.Sprintf("OFPT_ERROR (%s) (xid=0x0): %s", j.v, j.want)
				if first != want {
					mu.Lock()
					failures = append(failures, fmt.Sprintf("%x: ovs-ofctl says %q, want %q", b, first, want))
					mu.Unlock()
				}
			}
		}()
	}
	for _, j := range jobs {
		ch <- j
	}
	close(ch)
	wg.Wait()
	for _, f := range failures {
		t.Error(f)
	}
	if len(jobs) < 400 {
		t.Errorf("only %d (version, error) pairs checked", len(jobs))
	}
}

func TestOFErrorString(t *testing.T) {
	for _, tc := range []struct {
		name     string
		err      *OFError
		wantName string
		wantErr  string
	}{
		{"standard", &OFError{Version: Version13, Type: 2, Code: 9},
			"OFPBAC_BAD_OUT_GROUP", "OFPBAC_BAD_OUT_GROUP (type 2 code 9)"},
		{"nicira experimenter", &OFError{Version: Version15, Type: 0xffff, Code: 4, Experimenter: ExperimenterNicira},
			"NXBRC_MUST_BE_ZERO", "NXBRC_MUST_BE_ZERO (experimenter 0x2320 code 4)"},
		{"OF1.3 ONF bundle error", &OFError{Version: Version13, Type: 0xffff, Code: 2313, Experimenter: ExperimenterONF},
			"OFPBFC_MSG_FAILED", "OFPBFC_MSG_FAILED (experimenter 0x4f4e4600 code 2313)"},
		{"OF1.5 bundle error", &OFError{Version: Version15, Type: 17, Code: 13},
			"OFPBFC_MSG_FAILED", "OFPBFC_MSG_FAILED (type 17 code 13)"},
		{"bundle error type is unknown in OF1.3", &OFError{Version: Version13, Type: 17, Code: 13},
			"OFPET_BUNDLE_FAILED code 13", "OFPET_BUNDLE_FAILED code 13 (type 17 code 13)"},
		{"unknown code", &OFError{Version: Version15, Type: 2, Code: 99},
			"OFPET_BAD_ACTION code 99", "OFPET_BAD_ACTION code 99 (type 2 code 99)"},
		{"unknown type", &OFError{Version: Version15, Type: 77, Code: 1},
			"OFPET type 77 code 1", "OFPET type 77 code 1 (type 77 code 1)"},
		{"unknown experimenter", &OFError{Version: Version15, Type: 0xffff, Code: 5, Experimenter: 0x1234},
			"OFPET_EXPERIMENTER 0x1234 code 5", "OFPET_EXPERIMENTER 0x1234 code 5 (experimenter 0x1234 code 5)"},
		{"hello failed quotes the explanation", &OFError{Version: Version10, Type: 0, Code: 0, Data: []byte("We support versions 0x04 to 0x06, you support 0x01.\n\x00")},
			"OFPHFC_INCOMPATIBLE", `OFPHFC_INCOMPATIBLE (type 0 code 0): "We support versions 0x04 to 0x06, you support 0x01."`},
		{"newer version uses the OF1.5 table", &OFError{Version: 0x07, Type: 6, Code: 15},
			"OFPGMFC_UNKNOWN_BUCKET", "OFPGMFC_UNKNOWN_BUCKET (type 6 code 15)"},
		{"OF1.0 names only hello and request errors", &OFError{Version: Version10, Type: 2, Code: 9},
			"OFPET_BAD_ACTION code 9", "OFPET_BAD_ACTION code 9 (type 2 code 9)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.err.Name(); got != tc.wantName {
				t.Errorf("Name() = %q, want %q", got, tc.wantName)
			}
			if got := tc.err.Error(); got != tc.wantErr {
				t.Errorf("Error() = %q, want %q", got, tc.wantErr)
			}
		})
	}
}

func TestLookupError(t *testing.T) {
	for _, tc := range []struct {
		v        Version
		name     string
		typ      uint16
		code     uint16
		exp      uint32
		wantOK   bool
		testName string
	}{
		{Version13, "OFPBFC_MSG_FAILED", 0xffff, 2313, ExperimenterONF, true, "OF1.3 bundle error is ONF"},
		{Version15, "OFPBFC_MSG_FAILED", 17, 13, 0, true, "OF1.5 bundle error is type 17"},
		{Version15, "NXBRC_MUST_BE_ZERO", 0xffff, 4, ExperimenterNicira, true, "nicira"},
		{Version13, "OFPGMFC_BUCKET_EXISTS", 0, 0, 0, false, "OF1.5-only code in OF1.3"},
		{Version15, "NO_SUCH_ERROR", 0, 0, 0, false, "unknown name"},
	} {
		t.Run(tc.testName, func(t *testing.T) {
			typ, code, exp, ok := LookupError(tc.v, tc.name)
			if ok != tc.wantOK || typ != tc.typ || code != tc.code || exp != tc.exp {
				t.Errorf("LookupError = %d %d 0x%x %v, want %d %d 0x%x %v", typ, code, exp, ok, tc.typ, tc.code, tc.exp, tc.wantOK)
			}
			if e := NewError(tc.v, tc.name, []byte{1}); (e != nil) != tc.wantOK || (e != nil && e.Name() != tc.name) {
				t.Errorf("NewError = %v", e)
			}
		})
	}
}

func TestOFErrorIs(t *testing.T) {
	of13 := NewError(Version13, "OFPBFC_MSG_FAILED", nil)
	of15 := NewError(Version15, "OFPBFC_MSG_FAILED", []byte{1, 2})
	wrapped := fmt.Errorf("ofconn: bundle 3 commit: %w", of13)
	if !errors.Is(wrapped, of15) {
		t.Error("OF1.3 ONF MSG_FAILED is not OF1.5 MSG_FAILED")
	}
	if errors.Is(wrapped, NewError(Version15, "OFPBFC_TIMEOUT", nil)) {
		t.Error("MSG_FAILED is TIMEOUT")
	}
	var oe *OFError
	if !errors.As(wrapped, &oe) || oe.Code != 2313 {
		t.Errorf("errors.As = %v", oe)
	}
	unknown := &OFError{Version: Version15, Type: 2, Code: 99}
	if !errors.Is(unknown, &OFError{Version: Version13, Type: 2, Code: 99}) {
		t.Error("unknown codes compare by number")
	}
	if errors.Is(unknown, &OFError{Version: Version13, Type: 2, Code: 98}) {
		t.Error("different unknown codes are equal")
	}
}

// capturedOVSError is an ERROR that ovs-vswitchd 3.1 sent on a bridge's .mgmt
// socket (OF1.5) for a flow mod adding to table 255: the ofconn integration
// test TestIntegrationErrors logs it.
const capturedOVSError = `
06 01 00 4c 00 00 00 08 | OF1.5 ERROR, length 76, xid 8
00 05 00 02             | FLOW_MOD_FAILED, BAD_TABLE_ID
06 0e 00 40 00 00 00 08 | the failed flow mod, whole
00 00 00 00 00 00 00 00 | cookie
00 00 00 00 00 00 00 00 | cookie mask
ff 00 00 00 00 00 00 0a | table 255, ADD, idle 0, hard 0, priority 10
ff ff ff ff ff ff ff ff | buffer id, out port
ff ff ff ff 00 00 00 00 | out group, flags, importance
00 01 00 0a 80 00 0a 02 | match: eth_type
08 00 00 00 00 00 00 00 | = 0x0800`

func TestDecodeOVSError(t *testing.T) {
	b := mcHex(t, capturedOVSError)
	h, m, err := Unmarshal(b)
	if err != nil {
		t.Fatal(err)
	}
	e, ok := m.(*OFError)
	if !ok {
		t.Fatalf("decoded %T", m)
	}
	if h.Xid != 8 || e.Version != Version15 || e.Name() != "OFPFMFC_BAD_TABLE_ID" {
		t.Errorf("got xid %d %s %s", h.Xid, e.Version, e.Name())
	}
	if got, want := e.Error(), "OFPFMFC_BAD_TABLE_ID (type 5 code 2)"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	rh, _, err := e.Request()
	if err != nil {
		t.Fatalf("Request(): %v", err)
	}
	if rh.Type != TypeFlowMod || rh.Xid != 8 || rh.Length != 64 {
		t.Errorf("request header %+v", rh)
	}
	first, _, _ := strings.Cut(mcOfpPrint(t, b), "\n")
	if first != "OFPT_ERROR (OF1.5) (xid=0x8): OFPFMFC_BAD_TABLE_ID" {
		t.Errorf("ovs-ofctl: %q", first)
	}
	mcRoundTrip(t, Version15, 8, e)
}

func TestOFErrorDecode(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      string
		want    *OFError
		wantErr error
	}{
		{"nicira must be zero with request", "04 01 00 18 00 00 00 09 ff ff 00 04 00 00 23 20 04 14 00 08 00 00 00 09",
			&OFError{Version: Version13, Type: 0xffff, Code: 4, Experimenter: ExperimenterNicira, Data: mcHex(t, "04 14 00 08 00 00 00 09")}, nil},
		{"no data", "04 01 00 0c 00 00 00 00 00 01 00 01", &OFError{Version: Version13, Type: 1, Code: 1}, nil},
		{"too short for type and code", "04 01 00 0a 00 00 00 00 00 01", nil, io.ErrUnexpectedEOF},
		{"experimenter without id", "04 01 00 0e 00 00 00 00 ff ff 00 04 00 00", nil, io.ErrUnexpectedEOF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, m, err := Unmarshal(mcHex(t, tc.in))
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), "error") {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(m, tc.want) {
				t.Errorf("got %#v, want %#v", m, tc.want)
			}
		})
	}
	t.Run("truncated request data", func(t *testing.T) {
		e := &OFError{Version: Version13, Type: 1, Code: 6, Data: mcHex(t, "04 0e 00 40 00 00 00 01 00 00")}
		if _, _, err := e.Request(); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("err = %v", err)
		}
	})
}

func FuzzError(f *testing.F) {
	f.Add(mcHex(f, capturedOVSError))
	f.Add(mcHex(f, "04 01 00 18 00 00 00 09 ff ff 00 04 00 00 23 20 04 14 00 08 00 00 00 09"))
	f.Add(mcHex(f, "04 01 00 0c 00 00 00 00 00 01 00 01"))
	f.Add(mcHex(f, "01 01 00 14 00 00 00 00 00 00 00 00 57 65 20 73 75 70 70 00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < HeaderLen {
			return
		}
		b = append([]byte(nil), b...)
		b[1] = byte(TypeError)
		b[2], b[3] = byte(len(b)>>8), byte(len(b))
		if len(b) > MaxMessageLen {
			return
		}
		mcFuzzRoundTrip(t, b)
		if _, m, err := Unmarshal(b); err == nil {
			e := m.(*OFError)
			_ = e.Error()
			_, _, _ = e.Request()
		}
	})
}
