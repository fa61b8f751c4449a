// Package golden compares what a test renders with a golden file.
package golden

import (
	"os"
	"path/filepath"
	"testing"
)

// Check fails t unless got is the content of the file at path. With
// update (a test's -update flag) it first writes got there, creating the
// directory.
func Check(t testing.TB, path, got string, update bool) {
	t.Helper()
	if update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden file (run with -update to create it): %v", err)
	}
	if got != string(want) {
		t.Errorf("differs from %s (run with -update after checking):\n--- got\n%s--- want\n%s", path, got, want)
	}
}
