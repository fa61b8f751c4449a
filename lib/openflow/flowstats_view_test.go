package openflow

import (
	"errors"
	"testing"
)

// TestFlowStatsViewFixtures reads the stored flow stats captures in place
// and checks each view against the decoded entry: the same numbers, a key
// equal to the decoded flow's, and a key built without allocating.
func TestFlowStatsViewFixtures(t *testing.T) {
	for _, name := range []string{"flowstats_of15.txt", "flowstats_of13.txt"} {
		t.Run(name, func(t *testing.T) {
			f := otLoadFixture(t, name)
			n := 0
			var buf []byte
			for _, b := range f.msgs {
				r, err := ViewMultipartReply(b)
				if err != nil {
					t.Fatal(err)
				}
				if d := otUnmarshal[*MultipartReply](t, b); d.Type != r.Type || d.Flags != r.Flags || d.Version != r.Version || string(d.Body) != string(r.Body) {
					t.Fatalf("view %+v, decoded %+v", r, d)
				}
				err = EachFlowStats(r.Body, r.Version, func(i int, s *FlowStatsView) error {
					fs, err := s.Decode()
					if err != nil {
						return err
					}
					if fs.Table != s.Table || fs.Priority != s.Priority || fs.Cookie != s.Cookie || fs.Flags != s.Flags || fs.Importance != s.Importance {
						t.Errorf("entry %d: view %+v, decoded %s", i, s, fs.String())
					}
					var k FlowKey
					k, buf, err = s.Key(buf)
					if err != nil {
						return err
					}
					if want := fs.Key(); k != want {
						t.Errorf("entry %d: key %v, want %v", i, k, want)
					}
					// Open vSwitch writes OpenFlow 1.5 matches canonically.
					if raw := s.RawKey(); r.Version == Version15 && raw != k {
						t.Errorf("entry %d: raw key %v differs from the canonical %v", i, raw, k)
					}
					if allocs := testing.AllocsPerRun(10, func() { _, buf, _ = s.Key(buf) }); allocs != 0 {
						t.Errorf("entry %d: Key allocates %.0f times", i, allocs)
					}
					n++
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
			}
			if n != len(f.want) {
				t.Errorf("%d entries, want %d", n, len(f.want))
			}
		})
	}
}

// TestFlowStatsViewMalformed checks that a truncated entry and an error of
// the callback stop the walk with that error.
func TestFlowStatsViewMalformed(t *testing.T) {
	f := otLoadFixture(t, "flowstats_of15.txt")
	r := otUnmarshal[*MultipartReply](t, f.msgs[0])
	if _, err := ViewMultipartReply(f.msgs[0][:len(f.msgs[0])-1]); err == nil {
		t.Error("a truncated message viewed without error")
	}
	if err := EachFlowStats(r.Body[:len(r.Body)-3], r.Version, func(int, *FlowStatsView) error { return nil }); err == nil {
		t.Error("a truncated reply walked without error")
	}
	stop := errors.New("stop")
	calls := 0
	if err := EachFlowStats(r.Body, r.Version, func(int, *FlowStatsView) error { calls++; return stop }); !errors.Is(err, stop) || calls != 1 {
		t.Errorf("callback error: %v after %d calls", err, calls)
	}
}

// FuzzFlowStatsView reads flow stats bodies in place: it never panics,
// it accepts what the decoder accepts, and an entry that decodes has a Key
// equal to its decoded flow's.
func FuzzFlowStatsView(f *testing.F) {
	for _, b := range otSeedOf(f, TypeMultipartReply) {
		if r, err := ViewMultipartReply(b); err == nil && r.Type == MultipartFlow {
			f.Add(byte(r.Version), r.Body)
		}
	}
	f.Fuzz(func(t *testing.T, v byte, body []byte) {
		ver := Version(v)
		_, decErr := unmarshalFlowStats(body, ver)
		var buf []byte
		walkErr := EachFlowStats(body, ver, func(i int, s *FlowStatsView) error {
			_ = s.RawKey()
			k, b, kerr := s.Key(buf)
			buf = b
			fs, err := s.Decode()
			if err != nil {
				return err
			}
			if kerr != nil {
				t.Fatalf("entry %d decodes but has no key: %v", i, kerr)
			}
			if want := fs.Key(); k != want {
				t.Fatalf("entry %d: key %v, decoded flow's %v", i, k, want)
			}
			return nil
		})
		if (walkErr == nil) != (decErr == nil) {
			t.Fatalf("in place: %v; decoded: %v", walkErr, decErr)
		}
	})
}
