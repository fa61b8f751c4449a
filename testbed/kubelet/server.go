package kubelet

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	authorizationv1 "k8s.io/api/authorization/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cri-streaming/pkg/streaming/portforward"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"

	"nodeflow/testbed/nsutil"
)

// The kubelet API: the part of it that `kubectl logs`, `kubectl exec`,
// `kubectl attach` and `kubectl port-forward` reach through the API
// server, on the node's kubelet port, over TLS with the kubelet's
// authentication (a client certificate from the cluster's CA) and
// authorization (a SubjectAccessReview on the node's nodes/proxy or
// nodes/log, as a kubelet in webhook mode asks).

// ServerConfig configures the kubelet API.
type ServerConfig struct {
	// Port is the port the API listens on, on every address of the node's
	// network namespace (10250 if zero).
	Port int
	// CertPEM and KeyPEM are the serving certificate and key.
	CertPEM, KeyPEM []byte
	// ClientCAPEM verifies client certificates.
	ClientCAPEM []byte
}

// Timeouts of the streaming connections, a kubelet's defaults.
const (
	streamIdleTimeout     = 4 * time.Hour
	streamCreationTimeout = remotecommand.DefaultStreamCreationTimeout
)

// serve runs the kubelet API until ctx ends.
func (k *Kubelet) serve(ctx context.Context) error {
	sc := k.cfg.Server
	cert, err := tls.X509KeyPair(sc.CertPEM, sc.KeyPEM)
	if err != nil {
		return fmt.Errorf("kubelet API: serving certificate: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(sc.ClientCAPEM) {
		return errors.New("kubelet API: no client CA certificate")
	}
	l, err := nsutil.Listen(k.cfg.NodeNetns, "tcp", ":"+strconv.Itoa(k.port()))
	if err != nil {
		return fmt.Errorf("kubelet API: listen: %w", err)
	}
	srv := &http.Server{
		Handler:           k.handler(),
		ReadHeaderTimeout: 30 * time.Second,
		TLSConfig: &tls.Config{
			Certificates: []tls.Certificate{cert},
			ClientCAs:    pool,
			ClientAuth:   tls.VerifyClientCertIfGiven,
			MinVersion:   tls.VersionTLS12,
		},
	}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	k.log.WithField("port", k.port()).Info("kubelet API listening")
	if err := srv.ServeTLS(l, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("kubelet API: %w", err)
	}
	return nil
}

func (k *Kubelet) port() int {
	if k.cfg.Server.Port != 0 {
		return k.cfg.Server.Port
	}
	return 10250
}

// handler routes the kubelet API's paths.
func (k *Kubelet) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	mux.HandleFunc("/pods", k.authorized("proxy", k.servePods))
	mux.HandleFunc("/metrics", k.authorized("metrics", k.serveMetrics))
	mux.HandleFunc("/metrics/resource", k.authorized("metrics", k.serveMetrics))
	mux.HandleFunc("/containerLogs/{ns}/{pod}/{container}", k.authorized("log", k.serveLogs))
	mux.HandleFunc("/logs/", k.authorized("log", k.serveNodeLogs))
	for _, p := range []string{"/exec/{ns}/{pod}/{container}", "/exec/{ns}/{pod}/{uid}/{container}"} {
		mux.HandleFunc(p, k.authorized("proxy", k.serveExec))
	}
	for _, p := range []string{"/attach/{ns}/{pod}/{container}", "/attach/{ns}/{pod}/{uid}/{container}"} {
		mux.HandleFunc(p, k.authorized("proxy", k.serveAttach))
	}
	for _, p := range []string{"/portForward/{ns}/{pod}", "/portForward/{ns}/{pod}/{uid}"} {
		mux.HandleFunc(p, k.authorized("proxy", k.servePortForward))
	}
	return mux
}

// authorized wraps h with the kubelet's authentication and authorization:
// the client's certificate names the user (CN) and its groups (O); a
// SubjectAccessReview asks the API server whether that user may use the
// node's subresource (verb get for GET, create otherwise).
func (k *Kubelet) authorized(subresource string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		subject := r.TLS.PeerCertificates[0].Subject
		verb := "create"
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			verb = "get"
		}
		if err := k.authorize(r.Context(), subject.CommonName, subject.Organization, verb, subresource); err != nil {
			http.Error(w, fmt.Sprintf("Forbidden (user=%s, verb=%s, resource=nodes, subresource=%s): %v", subject.CommonName, verb, subresource, err), http.StatusForbidden)
			return
		}
		h(w, r)
	}
}

// authorize asks the API server, caching allowed answers for five minutes
// and denied ones for 30 s, as a kubelet does.
func (k *Kubelet) authorize(ctx context.Context, user string, groups []string, verb, subresource string) error {
	key := strings.Join(append([]string{user, verb, subresource}, groups...), "\x00")
	k.authMu.Lock()
	if e, ok := k.authCache[key]; ok && time.Now().Before(e.until) {
		k.authMu.Unlock()
		return e.err
	}
	k.authMu.Unlock()
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: user, Groups: groups,
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Verb: verb, Resource: "nodes", Subresource: subresource, Name: k.cfg.NodeName,
		},
	}}
	res, err := k.cfg.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("subject access review: %w", err)
	}
	ttl := 5 * time.Minute
	if !res.Status.Allowed {
		err = fmt.Errorf("not allowed: %s", res.Status.Reason)
		ttl = 30 * time.Second
	}
	k.authMu.Lock()
	k.authCache[key] = authEntry{err: err, until: time.Now().Add(ttl)}
	k.authMu.Unlock()
	return err
}

type authEntry struct {
	err   error
	until time.Time
}

// worker returns the worker of the pod namespace/name (and uid if given).
func (k *Kubelet) worker(ns, name, uid string) *podWorker {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, w := range k.workers {
		pod, _ := w.snapshot()
		if pod.Namespace == ns && pod.Name == name && (uid == "" || string(pod.UID) == uid) {
			return w
		}
	}
	return nil
}

// target finds the request's pod and container.
func (k *Kubelet) target(r *http.Request) (*podWorker, *container, error) {
	w := k.worker(r.PathValue("ns"), r.PathValue("pod"), r.PathValue("uid"))
	if w == nil {
		return nil, nil, fmt.Errorf("pod %s/%s is not on node %s", r.PathValue("ns"), r.PathValue("pod"), k.cfg.NodeName)
	}
	name := r.PathValue("container")
	if name == "" {
		c, err := w.defaultContainer()
		return w, c, err
	}
	c := w.container(name)
	if c == nil {
		return nil, nil, fmt.Errorf("container %s is not valid for pod %s/%s", name, r.PathValue("ns"), r.PathValue("pod"))
	}
	return w, c, nil
}

func (k *Kubelet) servePods(w http.ResponseWriter, _ *http.Request) {
	k.mu.Lock()
	list := v1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"}}
	for _, pw := range k.workers {
		pod, _ := pw.snapshot()
		list.Items = append(list.Items, *pod)
	}
	k.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(list)
}

// serveNodeLogs serves the node's logs, as a kubelet serves /var/log: the
// *.log files of the node's directory (the kubelet's and the agent's), a
// listing at /logs/.
func (k *Kubelet) serveNodeLogs(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(r.URL.Path, "/logs/")
	if name == "" {
		matches, _ := filepath.Glob(filepath.Join(k.cfg.StateDir, "*.log"))
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintln(w, "<pre>")
		for _, m := range matches {
			b := filepath.Base(m)
			fmt.Fprintf(w, "<a href=%q>%s</a>\n", b, html.EscapeString(b))
		}
		fmt.Fprintln(w, "</pre>")
		return
	}
	if strings.Contains(name, "/") || !strings.HasSuffix(name, ".log") {
		http.NotFound(w, r)
		return
	}
	http.ServeFile(w, r, filepath.Join(k.cfg.StateDir, name))
}

// serveMetrics serves the kubelet's metrics in the Prometheus text format:
// the pods and containers it runs (the stand-in keeps no latency
// histograms).
func (k *Kubelet) serveMetrics(w http.ResponseWriter, _ *http.Request) {
	k.mu.Lock()
	pods, containers := 0, 0
	for _, pw := range k.workers {
		pods++
		pw.mu.Lock()
		for _, c := range pw.containers {
			if c.running() {
				containers++
			}
		}
		pw.mu.Unlock()
	}
	k.mu.Unlock()
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	fmt.Fprintf(w, "# HELP kubelet_running_pods Number of pods that have a running pod sandbox\n# TYPE kubelet_running_pods gauge\nkubelet_running_pods %d\n", pods)
	fmt.Fprintf(w, "# HELP kubelet_running_containers Number of containers currently running\n# TYPE kubelet_running_containers gauge\nkubelet_running_containers{container_state=\"running\"} %d\n", containers)
}

// streamTarget finds a streaming request's pod and container and reads
// its stream options; it answers the request itself when it cannot.
func (k *Kubelet) streamTarget(w http.ResponseWriter, r *http.Request) (*v1.Pod, *streams, *remotecommand.Options, bool) {
	pw, c, err := k.target(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return nil, nil, nil, false
	}
	opts, err := remotecommand.NewOptions(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return nil, nil, nil, false
	}
	pod, _ := pw.snapshot()
	return pod, &streams{w: pw, c: c}, opts, true
}

func (k *Kubelet) serveExec(w http.ResponseWriter, r *http.Request) {
	if pod, s, opts, ok := k.streamTarget(w, r); ok {
		remotecommand.ServeExec(w, r, s, pod.Name, string(pod.UID), s.c.spec.Name, r.URL.Query()["command"],
			opts, streamIdleTimeout, streamCreationTimeout, remotecommand.SupportedStreamingProtocols)
	}
}

func (k *Kubelet) serveAttach(w http.ResponseWriter, r *http.Request) {
	if pod, s, opts, ok := k.streamTarget(w, r); ok {
		remotecommand.ServeAttach(w, r, s, pod.Name, string(pod.UID), s.c.spec.Name,
			opts, streamIdleTimeout, streamCreationTimeout, remotecommand.SupportedStreamingProtocols)
	}
}

func (k *Kubelet) servePortForward(w http.ResponseWriter, r *http.Request) {
	pw := k.worker(r.PathValue("ns"), r.PathValue("pod"), r.PathValue("uid"))
	if pw == nil {
		http.Error(w, fmt.Sprintf("pod %s/%s is not on node %s", r.PathValue("ns"), r.PathValue("pod"), k.cfg.NodeName), http.StatusNotFound)
		return
	}
	opts, err := portforward.NewV4Options(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	pod, _ := pw.snapshot()
	portforward.ServePortForward(w, r, &streams{w: pw}, pod.Name, string(pod.UID), opts,
		streamIdleTimeout, streamCreationTimeout, portforward.SupportedProtocols)
}

// streams serves exec, attach and port-forward for one pod.
type streams struct {
	w *podWorker
	c *container
}

// ExecInContainer implements remotecommand.Executor: the command runs in
// the container (with a pseudo-terminal when tty is set); a non-zero exit
// is reported with its code.
func (s *streams) ExecInContainer(ctx context.Context, _, _, _ string, argv []string, in io.Reader, out, errw io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize, _ time.Duration) error {
	pod, _ := s.w.snapshot()
	cmd, err := s.w.execCommand(ctx, pod, s.c, argv)
	if err != nil {
		return err
	}
	if tty {
		err = runTTY(cmd, in, out, resize)
	} else {
		err = runPiped(cmd, in, out, errw)
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return utilexec.CodeExitError{Err: err, Code: ee.ExitCode()}
	}
	return err
}

// runPiped runs cmd with in copied to its stdin (the copy does not hold up
// the command's end) and its output to out and errw.
func runPiped(cmd *exec.Cmd, in io.Reader, out, errw io.Writer) error {
	if out != nil {
		cmd.Stdout = out
	}
	if errw != nil {
		cmd.Stderr = errw
	}
	if in != nil {
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return err
		}
		go func() {
			_, _ = io.Copy(stdin, in)
			stdin.Close()
		}()
	}
	return cmd.Run()
}

// runTTY runs cmd on a new pseudo-terminal, resized as the client asks.
func runTTY(cmd *exec.Cmd, in io.Reader, out io.Writer, resize <-chan remotecommand.TerminalSize) error {
	// pty.Start makes the command a session leader with the terminal.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = nil
	tty, err := pty.Start(cmd)
	if err != nil {
		return err
	}
	defer tty.Close()
	go func() {
		for size := range resize {
			_ = pty.Setsize(tty, &pty.Winsize{Rows: size.Height, Cols: size.Width})
		}
	}()
	if in != nil {
		go func() { _, _ = io.Copy(tty, in) }()
	}
	copied := make(chan struct{})
	go func() {
		if out != nil {
			_, _ = io.Copy(out, tty)
		} else {
			_, _ = io.Copy(io.Discard, tty)
		}
		close(copied)
	}()
	err = cmd.Wait()
	select {
	case <-copied:
	case <-time.After(time.Second): // output still held by a descendant
	}
	return err
}

// AttachContainer implements remotecommand.Attacher: the client gets the
// container's output from now on and, if the container keeps stdin open,
// feeds it; it returns when the container's process exits.
func (s *streams) AttachContainer(ctx context.Context, _, _, _ string, in io.Reader, out, errw io.WriteCloser, _ bool, _ <-chan remotecommand.TerminalSize) error {
	s.c.mu.Lock()
	fan, stdin, exited := s.c.out, s.c.stdin, s.c.exited
	s.c.mu.Unlock()
	if fan == nil || exited == nil {
		return fmt.Errorf("container %s is not running", s.c.spec.Name)
	}
	var sink io.Writer = io.Discard
	if out != nil {
		sink = out
	} else if errw != nil {
		sink = errw
	}
	fan.add(sink)
	defer fan.remove(sink)
	if in != nil && stdin != nil {
		go func() { _, _ = io.Copy(stdin, in) }()
	}
	select {
	case <-exited:
	case <-ctx.Done():
	}
	return nil
}

// PortForward implements portforward.PortForwarder: it connects to port
// on the pod's loopback, from inside its network namespace, as a kubelet
// does, and copies both ways until either side closes.
func (s *streams) PortForward(ctx context.Context, _, _ string, port int32, stream io.ReadWriteCloser) error {
	s.w.mu.Lock()
	netns := s.w.netns
	s.w.mu.Unlock()
	if netns == "" {
		return errors.New("the pod has no network namespace")
	}
	var conn net.Conn
	var err error
	for _, host := range []string{"127.0.0.1", "::1"} {
		if conn, err = nsutil.Dial(ctx, netns, "tcp", net.JoinHostPort(host, strconv.Itoa(int(port))), 10*time.Second); err == nil {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("port-forward to port %d: %w", port, err)
	}
	defer conn.Close()
	done := make(chan struct{}, 2)
	go func() {
		_, _ = io.Copy(conn, stream)
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}()
	go func() {
		_, _ = io.Copy(stream, conn)
		done <- struct{}{}
	}()
	<-done
	return nil
}

// serveLogs serves a container's log as a kubelet does: the current
// instance's (or the previous one's), with the query's follow,
// timestamps, sinceSeconds, sinceTime, tailLines and limitBytes.
func (k *Kubelet) serveLogs(w http.ResponseWriter, r *http.Request) {
	pw, c, err := k.target(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	q := r.URL.Query()
	opts, err := parseLogOptions(q)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	attempt, exited, running := c.attempt-1, c.exited, c.proc != nil
	c.mu.Unlock()
	pod, _ := pw.snapshot()
	if opts.previous {
		attempt--
		running = false
	}
	if attempt < 0 {
		msg := fmt.Sprintf("container %q in pod %q is waiting to start", c.spec.Name, pod.Name)
		if opts.previous {
			msg = fmt.Sprintf("previous terminated container %q in pod %q not found", c.spec.Name, pod.Name)
		}
		http.Error(w, msg, http.StatusBadRequest)
		return
	}
	f, err := os.Open(k.containerLogDir(pod, c.spec.Name) + "/" + strconv.Itoa(attempt) + ".log")
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", "text/plain")
	if !opts.follow || !running {
		exited = nil
	}
	writeLogs(r.Context(), w, f, opts, exited)
}

// logOptions are a log request's parameters.
type logOptions struct {
	follow, previous, timestamps bool
	since                        time.Time
	tail                         int64 // -1 for all
	limit                        int64 // 0 for no limit
}

func parseLogOptions(q map[string][]string) (logOptions, error) {
	get := func(k string) string {
		if v := q[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	o := logOptions{follow: get("follow") == "true", previous: get("previous") == "true", timestamps: get("timestamps") == "true", tail: -1}
	if s := get("sinceSeconds"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 {
			return o, fmt.Errorf("sinceSeconds %q is not a positive number", s)
		}
		o.since = time.Now().Add(-time.Duration(n) * time.Second)
	}
	if s := get("sinceTime"); s != "" {
		t, err := time.Parse(time.RFC3339, s)
		if err != nil {
			return o, fmt.Errorf("sinceTime %q: %w", s, err)
		}
		o.since = t
	}
	if s := get("tailLines"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			return o, fmt.Errorf("tailLines %q is not a number", s)
		}
		o.tail = n
	}
	if s := get("limitBytes"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 {
			return o, fmt.Errorf("limitBytes %q is not a positive number", s)
		}
		o.limit = n
	}
	return o, nil
}

// logLine is one line of a CRI log file.
type logLine struct {
	time    time.Time
	stamp   string
	text    string
	partial bool
}

func parseLogLine(s string) (logLine, bool) {
	f := strings.SplitN(s, " ", 4)
	if len(f) < 3 {
		return logLine{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, f[0])
	if err != nil {
		return logLine{}, false
	}
	l := logLine{time: t, stamp: f[0], partial: f[2] == "P"}
	if len(f) == 4 {
		l.text = f[3]
	}
	return l, true
}

// writeLogs copies the log in f to w after opts; with exited set it
// follows the file until that channel closes (and the rest is read) or ctx
// ends.
func writeLogs(ctx context.Context, w io.Writer, f *os.File, opts logOptions, exited <-chan struct{}) {
	var written int64
	emit := func(l logLine) bool {
		var b strings.Builder
		if opts.timestamps {
			b.WriteString(l.stamp)
			b.WriteByte(' ')
		}
		b.WriteString(l.text)
		if !l.partial {
			b.WriteByte('\n')
		}
		s := b.String()
		if opts.limit > 0 && written+int64(len(s)) > opts.limit {
			s = s[:opts.limit-written]
		}
		n, err := io.WriteString(w, s)
		written += int64(n)
		if fl, ok := w.(http.Flusher); ok {
			fl.Flush()
		}
		return err == nil && (opts.limit == 0 || written < opts.limit)
	}
	rd := bufio.NewReader(f)
	var lines []logLine
	var pending string
	readAll := func() {
		for {
			s, err := rd.ReadString('\n')
			pending += s
			if err != nil {
				return
			}
			if l, ok := parseLogLine(strings.TrimSuffix(pending, "\n")); ok && !l.time.Before(opts.since) {
				lines = append(lines, l)
			}
			pending = ""
		}
	}
	readAll()
	if opts.tail >= 0 && int64(len(lines)) > opts.tail {
		lines = lines[int64(len(lines))-opts.tail:]
	}
	for _, l := range lines {
		if !emit(l) {
			return
		}
	}
	if exited == nil {
		return
	}
	tick := time.NewTicker(100 * time.Millisecond) // polling the file for new lines
	defer tick.Stop()
	for {
		done := false
		select {
		case <-ctx.Done():
			return
		case <-exited:
			done = true
		case <-tick.C:
		}
		lines = lines[:0]
		readAll()
		for _, l := range lines {
			if !emit(l) {
				return
			}
		}
		if done {
			return
		}
	}
}

// serverState is the kubelet API's share of the Kubelet.
type serverState struct {
	authMu    sync.Mutex
	authCache map[string]authEntry
}
