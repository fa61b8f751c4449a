// Command mkimage builds nodeflow's OCI image from binaries already built
// for each platform (`make image` builds them and calls it), with Go
// tooling alone, and writes it as an OCI layout directory and an OCI
// archive. It prints the index's digest: the same binaries and --created
// give the same digest.
package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/urfave/cli/v2"

	"nodeflow/internal/ociimage"
)

func main() {
	app := &cli.App{
		Name:      "mkimage",
		Usage:     "build nodeflow's OCI image from its binaries",
		ArgsUsage: " ",
		Flags: []cli.Flag{
			&cli.StringSliceFlag{Name: "bin", Required: true, Usage: "`OS/ARCH[/VARIANT]=PATH`: the binary of a platform (repeat for each)"},
			&cli.StringFlag{Name: "layout", Required: true, Usage: "write the OCI layout to `DIR` (replaced)"},
			&cli.StringFlag{Name: "archive", Usage: "also write it as an OCI archive `FILE` (podman load -i FILE)"},
			&cli.StringFlag{Name: "ref", Value: "nodeflow:dev", Usage: "the image's `NAME` in the layout"},
			&cli.StringFlag{Name: "version", Value: "dev", Usage: "the version label"},
			&cli.StringFlag{Name: "revision", Usage: "the commit label"},
			&cli.StringFlag{Name: "source", Usage: "the source label (a repository URL)"},
			&cli.StringFlag{Name: "created", Value: "0", EnvVars: []string{"SOURCE_DATE_EPOCH"}, Usage: "creation time, Unix `SECONDS` (the commit's, for a reproducible image)"},
		},
		Action: run,
	}
	if err := app.Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
}

func run(c *cli.Context) error {
	if c.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", c.Args().First())
	}
	secs, err := strconv.ParseInt(c.String("created"), 10, 64)
	if err != nil {
		return fmt.Errorf("--created: %q is not Unix seconds", c.String("created"))
	}
	created := time.Unix(secs, 0).UTC()
	opts := ociimage.Options{Version: c.String("version"), Revision: c.String("revision"), Source: c.String("source"), Created: created}
	for _, b := range c.StringSlice("bin") {
		plat, path, ok := strings.Cut(b, "=")
		if !ok || path == "" {
			return fmt.Errorf("--bin %q: want OS/ARCH=PATH", b)
		}
		p, err := v1.ParsePlatform(plat)
		if err != nil {
			return fmt.Errorf("--bin %q: platform: %w", b, err)
		}
		opts.Binaries = append(opts.Binaries, ociimage.Binary{Platform: *p, Path: path})
	}
	idx, err := ociimage.Build(opts)
	if err != nil {
		return err
	}
	if err := ociimage.WriteLayout(c.String("layout"), idx, c.String("ref")); err != nil {
		return err
	}
	if f := c.String("archive"); f != "" {
		if err := ociimage.WriteArchive(f, c.String("layout"), created); err != nil {
			return err
		}
	}
	d, err := idx.Digest()
	if err != nil {
		return err
	}
	fmt.Println(d)
	return nil
}
