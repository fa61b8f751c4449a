package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"nodeflow/internal/kubeclient"
	"nodeflow/model/idling"
)

func init() {
	commands = append(commands, idleCommand())
}

// idleCommand is `nodeflow idle`: what `oc idle` does.
func idleCommand() *cli.Command {
	return &cli.Command{
		Name:      "idle",
		Usage:     "idle Services: record their scalables on them and scale those to 0 (what `oc idle` does)",
		ArgsUsage: "[SERVICE...]",
		Description: "Finds the scalables (Deployment, ReplicaSet, ReplicationController, StatefulSet) behind each Service\n" +
			"from the pods of its ready endpoints, annotates the Service with " + idling.IdledAtAnnotation + "\n" +
			"and " + idling.UnidleTargetsAnnotation + ", then scales them to 0. A NeedPods event on the Service\n" +
			"(as the agent emits for a connection to it) makes `nodeflow unidler` scale them back up.",
		Flags: []cli.Flag{
			kubeconfigFlag(),
			&cli.StringFlag{Name: "namespace", Aliases: []string{"n"}, Usage: "`NAMESPACE` of the Services (default: the kubeconfig context's)"},
			&cli.StringFlag{Name: "selector", Aliases: []string{"l"}, Usage: "idle the Services matching this label `SELECTOR`"},
			&cli.BoolFlag{Name: "all", Usage: "idle every Service of the namespace"},
			&cli.BoolFlag{Name: "all-namespaces", Aliases: []string{"A"}, Usage: "with -l or --all: in every namespace"},
			&cli.StringFlag{Name: "resource-names-file", Usage: "idle the Services named in `FILE` (one a line, # comments; - is stdin)"},
			&cli.BoolFlag{Name: "dry-run", Usage: "print what would be done, change nothing"},
		},
		Action: runIdle,
	}
}

// kubeClient connects with a kubeconfig (or in-cluster), and returns the
// namespace of its context unless ns overrides it, and the clients that
// scale the kinds the API server serves beyond the built-in ones.
func kubeClient(kubeconfig, ns, agent string) (kubernetes.Interface, *idling.Discovered, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{Context: clientcmdapi.Context{Namespace: ns}})
	rc, err := cc.ClientConfig()
	if err != nil {
		return nil, nil, "", fmt.Errorf("kubeconfig: %w", err)
	}
	rc.UserAgent = rest.DefaultKubernetesUserAgent() + " " + agent
	if ns == "" {
		if ns, _, err = cc.Namespace(); err != nil {
			return nil, nil, "", fmt.Errorf("kubeconfig: namespace: %w", err)
		}
	}
	kc, err := kubeclient.NewTyped(rc)
	if err != nil {
		return nil, nil, "", fmt.Errorf("kubernetes client: %w", err)
	}
	d, err := idling.NewDiscovered(rc)
	if err != nil {
		return nil, nil, "", err
	}
	return kc, d, ns, nil
}

func runIdle(c *cli.Context) error {
	names := c.Args().Slice()
	file, sel, all, allNS := c.String("resource-names-file"), c.String("selector"), c.Bool("all"), c.Bool("all-namespaces")
	switch {
	case file != "" && (len(names) > 0 || sel != "" || all):
		return errors.New("idle: --resource-names-file excludes Service names, -l and --all")
	case len(names) > 0 && (sel != "" || all):
		return errors.New("idle: Service names exclude -l and --all")
	case allNS && sel == "" && !all:
		return errors.New("idle: -A needs -l or --all")
	case file == "" && len(names) == 0 && sel == "" && !all:
		return errors.New("idle: name the Services, or give -l, --all or --resource-names-file")
	}
	if file != "" {
		var err error
		if names, err = readNames(file, c.App.Reader); err != nil {
			return fmt.Errorf("idle: --resource-names-file: %w", err)
		}
		if len(names) == 0 {
			return fmt.Errorf("idle: --resource-names-file %s names no Service", file)
		}
	}
	kc, discovered, ns, err := kubeClient(c.String("kubeconfig"), c.String("namespace"), "nodeflow-idle")
	if err != nil {
		return fmt.Errorf("idle: %w", err)
	}
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	var services []types.NamespacedName
	if sel != "" || all {
		if allNS {
			ns = metav1.NamespaceAll
		}
		if services, err = listServices(ctx, kc, ns, sel); err != nil {
			return fmt.Errorf("idle: %w", err)
		}
		if len(services) == 0 {
			return fmt.Errorf("idle: no Service matches (namespace %q, selector %q)", ns, sel)
		}
	} else {
		for _, n := range names {
			name, err := serviceName(n)
			if err != nil {
				return fmt.Errorf("idle: %w", err)
			}
			services = append(services, types.NamespacedName{Namespace: ns, Name: name})
		}
	}
	rep, err := idling.Idle(ctx, idling.Options{Client: kc, Discovered: discovered, DryRun: c.Bool("dry-run")}, services)
	printReport(c.App.Writer, rep)
	if err != nil {
		return fmt.Errorf("idle: %w", err)
	}
	if err := rep.Err(); err != nil {
		return fmt.Errorf("idle: %w", err)
	}
	return nil
}

// serviceName accepts NAME, or service/NAME as kubectl writes it.
func serviceName(s string) (string, error) {
	if strings.HasPrefix(s, "-") {
		return "", fmt.Errorf("flag %s after the Service names: give the flags first", s)
	}
	kind, name, found := strings.Cut(s, "/")
	if !found {
		return s, nil
	}
	switch kind {
	case "service", "services", "svc":
		return name, nil
	}
	return "", fmt.Errorf("%q is not a Service name", s)
}

// readNames reads Service names, one a line; - is stdin.
func readNames(path string, stdin io.Reader) ([]string, error) {
	r := stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	var out []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		if line = strings.TrimSpace(line); line != "" {
			out = append(out, line)
		}
	}
	return out, sc.Err()
}

// listServices lists the Services of ns ("" for all) matching sel.
func listServices(ctx context.Context, kc kubernetes.Interface, ns, sel string) ([]types.NamespacedName, error) {
	list, err := kc.CoreV1().Services(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, fmt.Errorf("list services: %w", err)
	}
	var out []types.NamespacedName
	for _, s := range list.Items {
		out = append(out, types.NamespacedName{Namespace: s.Namespace, Name: s.Name})
	}
	slices.SortFunc(out, func(a, b types.NamespacedName) int { return strings.Compare(a.String(), b.String()) })
	return out, nil
}

// printReport tells what was (or would be) idled.
func printReport(w io.Writer, rep *idling.Report) {
	if rep == nil {
		return
	}
	suffix := ""
	if rep.DryRun {
		suffix = " (dry run)"
	}
	for _, s := range rep.Services {
		if s.Err != nil {
			continue
		}
		var ts []string
		for _, t := range s.Targets {
			ts = append(ts, fmt.Sprintf("%s to %d", t.Ref, t.Replicas))
		}
		fmt.Fprintf(w, "service %s idled at %s%s; wakes up %s\n", s.Service, rep.IdledAt.Format(time.RFC3339), suffix, strings.Join(ts, ", "))
	}
	for _, s := range rep.Scalables {
		if s.Err != nil {
			continue
		}
		fmt.Fprintf(w, "%s %s/%s scaled from %d to 0%s\n", s.Ref.Kind, s.Namespace, s.Ref.Name, s.Previous, suffix)
	}
}
