package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"nodeflow/datapath/reconcile"
)

func init() {
	commands = append(commands, flowsCommand())
}

// flowsCommand is `nodeflow flows`: the running agent's desired flows, or
// how the switch differs from them, in ovs-ofctl syntax.
func flowsCommand() *cli.Command {
	return &cli.Command{
		Name:  "flows",
		Usage: "print the agent's desired flows, groups and meters in ovs-ofctl syntax, or how OVS differs from them",
		Description: "Asks the running agent over its introspection socket. Without --diff it prints the desired\n" +
			"state owner by owner, each flow as `ovs-ofctl -O OpenFlow15 dump-flows --no-stats` prints it.\n" +
			"With --diff it prints what the switch has that is not wanted (-) and what is wanted but\n" +
			"missing (+), read from OVS now, and exits with status 1 when there are differences.\n" +
			"With --by-namespace it prints what each namespace's objects cost this node, most costly first:\n" +
			"flows per bridge, groups, buckets, the bytes the agent holds for them, and, with a namespace\n" +
			"budget, what the budget lets in and the objects it holds back.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "bridge", Usage: "only this bridge (default: all the agent owns)"},
			&cli.StringFlag{Name: "owner", Usage: "only owners whose name starts with `PREFIX` (e.g. service/default/)"},
			&cli.BoolFlag{Name: "diff", Usage: "print how OVS differs from the desired state right now"},
			&cli.BoolFlag{Name: "by-namespace", Usage: "print what each namespace costs: flows per bridge, groups, buckets, bytes, budget"},
			&cli.StringFlag{Name: "socket", Value: reconcile.DefaultSocket, EnvVars: []string{"NODEFLOW_SOCKET"}, Usage: "the agent's introspection `PATH`"},
			&cli.DurationFlag{Name: "timeout", Value: 30 * time.Second, Usage: "give up after this long"},
		},
		Action: runFlows,
	}
}

func runFlows(c *cli.Context) error {
	if err := noArgs(c, "flows"); err != nil {
		return err
	}
	path := "/flows"
	switch {
	case c.Bool("diff") && c.Bool("by-namespace"):
		return fmt.Errorf("flows: --diff and --by-namespace: choose one")
	case c.Bool("diff"):
		path = "/flows/diff"
	case c.Bool("by-namespace"):
		if c.String("owner") != "" || c.String("bridge") != "" {
			return fmt.Errorf("flows: --by-namespace covers every owner of every bridge: drop --owner and --bridge")
		}
		path = "/flows/namespaces"
	}
	q := url.Values{}
	if b := c.String("bridge"); b != "" {
		q.Set("bridge", b)
	}
	if o := c.String("owner"); o != "" {
		q.Set("owner", o)
	}
	sock := c.String("socket")
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}}
	ctx, cancel := context.WithTimeout(c.Context, c.Duration("timeout"))
	defer cancel()
	u := url.URL{Scheme: "http", Host: "nodeflow", Path: path, RawQuery: q.Encode()}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return fmt.Errorf("flows: %w", err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("flows: ask the agent at %s (is `nodeflow agent` running?): %w", sock, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("flows: agent answered %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	if _, err := io.Copy(c.App.Writer, resp.Body); err != nil {
		return fmt.Errorf("flows: %w", err)
	}
	if c.Bool("diff") {
		n, _ := strconv.Atoi(resp.Header.Get(reconcile.DifferencesHeader))
		if n > 0 {
			return cli.Exit(fmt.Sprintf("flows: %d differences", n), 1)
		}
		fmt.Fprintln(c.App.Writer, "# no differences")
	}
	return nil
}
