//go:build linux

package tests

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/finalizer-dev/finalizer/internal/natstest"
	"github.com/finalizer-dev/finalizer/internal/pgcluster/pgtest"
)

// TestEmbeddedNATSNeedsTheLogin (issue 9, item 8): any local user could
// publish to the default embedded NATS server, track runs, and purge its
// stream. By default the server now takes only logins: the service's own,
// and the machine owner's, kept in <data-dir>/nats-login.json (mode 0600),
// which track, join and publish use by default. The startup output names
// the file and never the password; a client without the login is refused.
func TestEmbeddedNATSNeedsTheLogin(t *testing.T) {
	pgURL := pgtest.URL(t)
	s := startServe(t, serveOpts{pgURL: pgURL})
	file := filepath.Join(s.dataDir, "nats-login.json")
	fi, err := os.Stat(file)
	if err != nil {
		t.Fatalf("no login file: %v", err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("%s: mode %o, want 600", file, fi.Mode().Perm())
	}
	raw, _ := os.ReadFile(file)
	password := between(string(raw), `"password": "`, `"`)
	if len(password) < 32 {
		t.Fatalf("login file: %s", raw)
	}
	if !strings.Contains(s.stdout.String(), "login in "+file) {
		t.Errorf("stdout does not name the login file:\n%s", s.stdout)
	}
	if strings.Contains(s.stdout.String()+s.stderr.String(), password) {
		t.Error("the password is in the output")
	}

	// Without the login: refused, for publishing and for the API alike.
	if nc, err := nats.Connect(s.natsBare); !errors.Is(err, nats.ErrAuthorization) {
		if nc != nil {
			nc.Close()
		}
		t.Fatalf("anonymous connect: %v, want an authorization error", err)
	}
	q, r := id(0x8100), id(0x8101)
	code, _, e := cli(t, nil, "track", "--nats-url", s.natsBare, "--data-dir", t.TempDir(), "--query-id", q, "--run-id", r, "--table", "login.t")
	if code != 2 || !strings.Contains(strings.ToLower(e), "authorization") {
		t.Errorf("track without the login: %d %s", code, e)
	}
	// Another local user cannot read the login, so cannot use it.
	if os.Geteuid() == 0 {
		bin := filepath.Join(openDir(t), "finalizer")
		if raw, err := os.ReadFile(binary); err != nil || os.WriteFile(bin, raw, 0o755) != nil {
			t.Fatalf("copy the binary: %v", err)
		}
		cmd := exec.Command(bin, "track", "--nats-url", s.natsBare, "--data-dir", s.dataDir, "--query-id", q, "--run-id", r, "--table", "login.t")
		cmd.Env = cleanEnv()
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(strings.ToLower(string(out)), "authorization") {
			t.Errorf("track as nobody: %v %s", err, out)
		}
	}

	// The owner's commands use the login (and the URL) of the data dir.
	if code, o, e := cli(t, nil, "track", "--data-dir", s.dataDir, "--query-id", q, "--run-id", r, "--table", "login.t"); code != 0 {
		t.Fatalf("track with the data dir's login: %d %s %s", code, o, e)
	}
	events := filepath.Join(t.TempDir(), "events.jsonl")
	if err := os.WriteFile(events, []byte(progressAt(q, r, "x", 1, "2026-09-28T13:10:00")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, o, e := cli(t, nil, "publish", "--data-dir", s.dataDir, events); code != 0 {
		t.Fatalf("publish with the data dir's login: %d %s %s", code, o, e)
	}
	waitVerdict(t, pgURL, "login.t", "2026-09-28T13:00:00Z")
}

// TestStreamDeletedAndPurgedByHand (issue 9, item 8): a deletion of the
// event stream (by anyone with the rights) is noticed and the stream
// recreated, events stored and applied again; a purge is logged and
// counted; /readyz is up once the stream is back.
func TestStreamDeletedAndPurgedByHand(t *testing.T) {
	pgURL := pgtest.URL(t)
	s := startServe(t, serveOpts{pgURL: pgURL})
	_, js := natstest.Connect(t, s.natsURL)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	q, r := id(0x8200), id(0x8201)
	if code, o, e := cli(t, nil, "track", "--nats-url", s.natsURL, "--query-id", q, "--run-id", r, "--table", "deleted.t"); code != 0 {
		t.Fatalf("track: %d %s %s", code, o, e)
	}
	pub := connect(t, s.natsURL)
	pub.publish("progress", q, r, progressAt(q, r, "x", 1, "2026-09-28T13:10:00"))
	waitVerdict(t, pgURL, "deleted.t", "2026-09-28T13:00:00Z")

	st, err := js.Stream(ctx, "SPARK_EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the purge counted", func() bool {
		return sample(t, s.httpURL, `finalizer_stream_incidents_total{kind="purged"}`) == 1
	})
	s.logged(t, "the purge", "the event stream was purged")

	if err := js.DeleteStream(ctx, "SPARK_EVENTS"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the deletion counted", func() bool {
		return sample(t, s.httpURL, `finalizer_stream_incidents_total{kind="deleted"}`) == 1
	})
	eventually(t, "/readyz up with the stream back", func() bool {
		code, _ := httpGet(t, s.httpURL+"/readyz", "")
		return code == 200
	})
	pub.publish("progress", q, r, progressAt(q, r, "x", 2, "2026-09-28T14:10:00"))
	waitVerdict(t, pgURL, "deleted.t", "2026-09-28T14:00:00Z")
	eventually(t, "the stream stores again", func() bool {
		st, err := js.Stream(ctx, "SPARK_EVENTS")
		if err != nil {
			return false
		}
		_, err = st.GetLastMsgForSubject(ctx, "spark.progress."+q+"."+r)
		return err == nil
	})
}

// between returns the text of s between the first from and the next to.
func between(s, from, to string) string {
	_, rest, ok := strings.Cut(s, from)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, to)
	return v
}

// TestLoginNeverGoesToAnotherUsersServer (issue 9 review): while the
// service is stopped, any local user may listen on its NATS port; track,
// join and publish used to send the owner's login (kept across restarts)
// in the CONNECT to whoever answered, so the squatter logged in with every
// permission at the next start. They now send it only to a server whose
// socket belongs to the login file's owner, and fail at once otherwise.
func TestLoginNeverGoesToAnotherUsersServer(t *testing.T) {
	if os.Geteuid() != 0 || runtime.GOOS != "linux" {
		t.Skip("needs root to listen as another user (internal/peerowner tests the refusal without)")
	}
	// The squatter: a listener whose sockets belong to nobody (an accepted
	// socket takes the uid of the thread that accepts it).
	ln := listenAs(t, 65534)
	got := make(chan string, 8)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		if err := syscall.Setfsuid(65534); err != nil {
			panic(err)
		}
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte(`INFO {"server_id":"X","version":"2.10.0","proto":1,"headers":true,"auth_required":true,"max_payload":1048576}` + "\r\n"))
			_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
			buf, _ := io.ReadAll(c)
			_ = c.Close()
			got <- string(buf)
		}
	}()
	dir := t.TempDir()
	const password = "a1b2c3d4e5f6a1b2c3d4e5f6a1b2c3d4e5f6a1b2c3d4e5f6"
	login := `{"url": "nats://` + ln.Addr().String() + `", "user": "finalizer-local", "password": "` + password + `"}`
	if err := os.WriteFile(filepath.Join(dir, "nats-login.json"), []byte(login), 0o600); err != nil {
		t.Fatal(err)
	}
	events := filepath.Join(t.TempDir(), "events.jsonl")
	q, r := id(0x8200), id(0x8201)
	if err := os.WriteFile(events, []byte(progressAt(q, r, "x", 1, "2026-09-28T13:10:00")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"publish", "--data-dir", dir, events},
		{"track", "--data-dir", dir, "--query-id", q, "--run-id", r, "--table", "squat.t"},
		{"join", "--data-dir", dir, "--run-id", r, "--timeout", "2s"},
	} {
		code, o, e := cli(t, nil, args...)
		if code != 2 || !strings.Contains(e, "not sent") {
			t.Errorf("%s against another user's server: %d %s %s", args[0], code, o, e)
		}
	}
	_ = ln.Close()
	for {
		select {
		case s := <-got:
			if strings.Contains(s, password) {
				t.Fatalf("the squatter read the password: %q", s)
			}
			continue
		case <-time.After(500 * time.Millisecond):
		}
		break
	}
}

// listenAs listens on a loopback port with a socket owned by uid (its
// file system uid, on one locked thread).
func listenAs(t *testing.T, uid int) net.Listener {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := syscall.Setfsuid(uid); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	_ = syscall.Setfsuid(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	return ln
}
