package workload

import (
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func TestServe(t *testing.T) {
	port := freePort(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, Config{Pod: "web-1", TCP: []int{port}, UDP: []int{port}}) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	url := "http://127.0.0.1:" + strconv.Itoa(port)
	var body string
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := http.Get(url + "/anything")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			body = string(b)
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	pod, client, _, err := ParseReply(body)
	if err != nil || pod != "web-1" || !strings.HasPrefix(client, "127.0.0.1:") {
		t.Errorf("reply %q: pod %q client %q err %v", body, pod, client, err)
	}

	// Readiness toggles.
	status := func() int {
		resp, err := http.Get(url + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if s := status(); s != 200 {
		t.Errorf("readyz %d", s)
	}
	if _, err := http.Post(url+"/readyz/fail", "", nil); err != nil {
		t.Fatal(err)
	}
	if s := status(); s != 503 {
		t.Errorf("readyz after fail %d", s)
	}
	http.Post(url+"/readyz/ok", "", nil)
	if s := status(); s != 200 {
		t.Errorf("readyz after ok %d", s)
	}

	// UDP echo.
	c, err := net.Dial("udp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1500)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	pod, client, rest, err := ParseReply(string(buf[:n]))
	if err != nil || pod != "web-1" || client != c.LocalAddr().String() || rest != "hello" {
		t.Errorf("udp reply %q: %q %q %q %v", buf[:n], pod, client, rest, err)
	}
}

func TestParseReply(t *testing.T) {
	if _, _, _, err := ParseReply("hello"); err == nil {
		t.Error("garbage accepted")
	}
}
