package conntrack

import "testing"

func TestFragmentPortsFixed(t *testing.T) {
	for v, want := range map[string]bool{
		"3.1.0": false, "3.1.6": false, "3.1.7": true, "3.1.0-2+deb12u1": false,
		"2.17.11": false, "2.17.12": true, "2.16.9": false, "3.0.8": true,
		"3.2.4": false, "3.3.4": true, "3.4.1": false, "3.4.2": true,
		"3.5.0": true, "3.6.90": true, "4.0.0": true,
		"": true, "unknown": true, "3.x.0": true,
	} {
		if got := FragmentPortsFixed(v); got != want {
			t.Errorf("FragmentPortsFixed(%q) = %v, want %v", v, got, want)
		}
	}
}

func TestExpiredFragmentsDropped(t *testing.T) {
	for v, want := range map[string]bool{
		"3.1.0": false, "3.1.7": false, "3.1.0-2+deb12u1": false, "2.17.12": false, "3.0.8": false,
		"3.2.5": false, "3.2.6": true, "3.3.4": false, "3.3.5": true, "3.4.2": false, "3.4.3": true,
		"3.5.0": false, "3.5.1": true, "3.6.0": true, "4.0.0": true,
		"": true, "unknown": true,
	} {
		if got := ExpiredFragmentsDropped(v); got != want {
			t.Errorf("ExpiredFragmentsDropped(%q) = %v, want %v", v, got, want)
		}
	}
}
