package netstack

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// The agent's records in the CNI data directory (NodeL3File,
// UplinkStateFile): JSON files that a restarted agent and `nodeflow
// cleanup` read back.

// dataDirFile is the file name in the CNI data directory dataDir; "" when
// dataDir is "" (no records are kept).
func dataDirFile(dataDir, name string) string {
	if dataDir == "" {
		return ""
	}
	return filepath.Join(dataDir, name)
}

// writeRecord writes v as indented JSON to path, making its directory if
// needed, through a temporary file and a rename, so that a reader never
// sees half a record. Errors name the record: what, and path.
func writeRecord(what, path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("hostnet: %s %s: %w", what, path, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("hostnet: %s %s: %w", what, path, err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("hostnet: %s %s: %w", what, path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("hostnet: %s %s: %w", what, path, err)
	}
	return nil
}
