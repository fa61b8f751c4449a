package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v2"
)

func init() {
	commands = append(commands, &cli.Command{
		Name:  "install-cni",
		Usage: "install this binary as the CNI plugin (the agent DaemonSet's init container runs it)",
		Description: "Copies the running nodeflow binary to --to (by default /opt/cni/bin/nodeflow) through a temporary\n" +
			"file and a rename, so that a runtime never runs a half-written plugin.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "to", Value: "/opt/cni/bin/nodeflow", Usage: "the plugin's `PATH`"},
		},
		Action: func(c *cli.Context) error {
			if err := noArgs(c, "install-cni"); err != nil {
				return err
			}
			self, err := os.Executable()
			if err != nil {
				return fmt.Errorf("install-cni: %w", err)
			}
			if err := installFile(self, c.String("to")); err != nil {
				return fmt.Errorf("install-cni: %w", err)
			}
			fmt.Fprintf(c.App.Writer, "installed %s as %s\n", self, c.String("to"))
			return nil
		},
	})
}

// installFile copies src to dst, executable, through a temporary file in
// dst's directory renamed over dst.
func installFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, in); err != nil {
		tmp.Close()
		return fmt.Errorf("copy to %s: %w", tmp.Name(), err)
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}
