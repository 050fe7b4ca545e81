//go:build linux

package tests

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/finalizer-dev/finalizer/internal/pgcluster/pgtest"
)

// TestStreamThatCannotStore (issue 9, item 4): descriptors exhausted while
// the embedded server stores events leave the stream's file store with a
// write error it keeps ("too many open files"), refusing every later event
// until a restart. /readyz must say so (it said 200), and the service must
// stop with an error for its supervisor to restart it (it ran on, broken);
// the restart stores events again.
func TestStreamThatCannotStore(t *testing.T) {
	pgURL := pgtest.URL(t)
	s := startServe(t, serveOpts{pgURL: pgURL})
	pub := connect(t, s.natsURL)
	pid := s.cmd.Process.Pid
	fds := func() int {
		ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		if err != nil {
			t.Skipf("no /proc: %v", err)
		}
		return len(ents)
	}
	// Five blocks of the file store (8 MB each), the oldest closed.
	big := strings.Repeat("x", 900_000)
	for i := range 40 {
		pub.publish("idle", id(0x5100+i), id(0x5200+i), big)
	}
	if code, body := httpGet(t, s.httpURL+"/readyz", ""); code != 200 {
		t.Fatalf("/readyz before: %d %s", code, body)
	}
	// nofile just above what the service holds, then a flood of idle HTTP
	// connections takes every descriptor left.
	limit := uint64(fds() + 20)
	if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: limit, Max: limit}, nil); err != nil {
		t.Skipf("prlimit: %v", err)
	}
	host := strings.TrimPrefix(s.httpURL, "http://")
	var flood []net.Conn
	for range 100 {
		c, err := net.Dial("tcp", host)
		if err != nil {
			break
		}
		flood = append(flood, c)
	}
	eventually(t, "descriptors exhausted", func() bool { return uint64(fds()) >= limit })
	// Replacing an event of an old block opens that block: too many open
	// files, and the file store keeps the error.
	for i := range 40 {
		pub.publish("idle", id(0x5100+i), id(0x5200+i), "{}")
	}
	eventually(t, "the store's write error", func() bool {
		return strings.Contains(s.stderr.String(), "too many open files") && strings.Contains(s.stderr.String(), "Critical write error")
	})
	for _, c := range flood {
		c.Close()
	}
	// Descriptors free again: /readyz says the stream is down (until the
	// second check stops the service), never 200.
	down := false
	for {
		select {
		case <-s.done:
		default:
			code, body := httpGetMaybe(s.httpURL + "/readyz")
			switch {
			case code == 200:
				t.Fatalf("/readyz 200 with a stream that cannot store: %s", body)
			case code == 503 && strings.Contains(body, `"stream": "down"`):
				down = true
			}
			time.Sleep(50 * time.Millisecond)
			continue
		}
		break
	}
	if !down {
		t.Errorf("/readyz never said the stream is down")
	}
	var ee *exec.ExitError
	if !errors.As(s.exit, &ee) || ee.ExitCode() == 0 {
		t.Fatalf("serve exited with %v, want an exit code other than 0", s.exit)
	}
	if !strings.Contains(s.stderr.String(), "cannot store") {
		t.Errorf("no log line says why it stopped:\n%s", tail(s.stderr.String(), 20))
	}
	t.Logf("exit: %v; %s", s.exit, grep(s.stderr.String(), "a part of the service failed"))

	// The supervisor's restart opens the store afresh: events are stored
	// and applied again.
	s2 := startServe(t, serveOpts{pgURL: pgURL, dataDir: s.dataDir})
	if code, body := httpGet(t, s2.httpURL+"/readyz", ""); code != 200 {
		t.Fatalf("/readyz after the restart: %d %s", code, body)
	}
	q, r := id(0x5300), id(0x5301)
	if code, o, e := cli(t, nil, "track", "--nats-url", s2.natsURL, "--query-id", q, "--run-id", r, "--table", "store.after"); code != 0 {
		t.Fatalf("track: %d %s %s", code, o, e)
	}
	connect(t, s2.natsURL).publish("progress", q, r, progressAt(q, r, "x", 1, "2026-09-28T13:10:00"))
	waitVerdict(t, pgURL, "store.after", "2026-09-28T13:00:00Z")
	if strings.Contains(s2.stderr.String(), "Critical write error") {
		t.Errorf("the restarted store failed again:\n%s", grep(s2.stderr.String(), "Critical"))
	}
}

// httpGetMaybe is httpGet for a server that may be gone: 0 when it does not
// answer.
func httpGetMaybe(url string) (int, string) {
	c := &http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
