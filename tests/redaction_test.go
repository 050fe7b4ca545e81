//go:build linux

package tests

import (
	"bytes"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestNoCommandPrintsASecretOfAURL (issue 9, item 2) runs every command
// of the binary (the list is read from its --help, so a new command fails
// here until it is added) with URLs that carry a known secret, in every
// URL setting at once (NATS, PostgreSQL, the HTTP API), well-formed and
// malformed, pointing at nothing, and searches everything each one
// printed for the secret. Before, track, join and publish printed a
// malformed NATS URL whole in their connect errors, status printed its
// --http-url, the service logged a NATS token given as the URL's user, and
// serve printed the managed cluster's password in its banner.
func TestNoCommandPrintsASecretOfAURL(t *testing.T) {
	const secret = "Zq8s3cretXy"
	dir := t.TempDir()
	events := writeFile(t, dir, "events.jsonl", progressAt(id(0xd00), id(0xd01), "x", 1, "2026-09-28T13:10:00")+"\n", 0o644)
	argsOf := map[string][]string{
		"acknowledge": {"--table", "t", "--reason", "r"},
		"audit":       nil,
		"bench":       {"--runs", "10"},
		"feeders":     {"list"}, // and "feeders retire", below
		"is-final":    {"--table", "t", "--period-end", "2026-09-28T15:00:00Z"},
		"join":        {"--run-id", id(0xd01), "--timeout", "1s"},
		"publish":     {events},
		"rewind":      {"--table", "t", "--to", "2026-09-28T13:00:00Z", "--reason", "r"},
		"serve":       {"--http-listen", "127.0.0.1:0", "--log-level", "debug"},
		"status":      nil,
		"track":       {"--query-id", id(0xd00), "--run-id", id(0xd01), "--table", "t"},
		"version":     nil,
		"wait":        {"--table", "t", "--until", "2026-09-28T15:00:00Z", "--timeout", "1s"},
	}
	_, help, _ := cli(t, nil, "--help")
	var commands []string
	inList := false
	for _, line := range strings.Split(help, "\n") {
		switch {
		case strings.HasPrefix(line, "Available Commands:"):
			inList = true
		case inList && strings.TrimSpace(line) == "":
			inList = false
		case inList:
			name := strings.Fields(line)[0]
			if name == "help" || name == "completion" {
				continue
			}
			if _, ok := argsOf[name]; !ok {
				t.Errorf("command %q is not covered: add its arguments to this test", name)
				continue
			}
			commands = append(commands, name)
		}
	}
	if len(commands) < 10 {
		t.Fatalf("found only %v in --help", commands)
	}

	variants := map[string]struct{ nats, pg, http string }{
		"user and password": {"nats://u:" + secret + "@127.0.0.1:1", "postgres://u:" + secret + "@127.0.0.1:1/db", "http://u:" + secret + "@127.0.0.1:1"},
		"token as user":     {"nats://" + secret + "@127.0.0.1:1", "postgres://u:" + secret + "@127.0.0.1:1/db", "http://" + secret + "@127.0.0.1:1"}, // PostgreSQL has no token: its user name is no secret,
		"bad escape":        {"nats://u:" + secret + "%zz@127.0.0.1:1", "postgres://u:" + secret + "%zz@127.0.0.1:1/db", "http://u:" + secret + "%zz@127.0.0.1:1"},
		"bad host":          {"tls://u:" + secret + "@[::1:1", "postgres://u:" + secret + "@[::1:1/db", "http://u:" + secret + "@[::1:1"},
		"list and query":    {"nats://127.0.0.1:1, nats://" + secret + "@127.0.0.1:2", "postgres://127.0.0.1:1/db?password=" + secret, "http://127.0.0.1:1/?token=" + secret},
	}
	for name, v := range variants {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			env := []string{
				"FINALIZER_NATS_URL=" + v.nats, "FINALIZER_POSTGRES_URL=" + v.pg, "FINALIZER_HTTP_URL=" + v.http,
				"FINALIZER_DATA_DIR=" + t.TempDir(),
			}
			runs := [][]string{{"feeders", "retire", "--table", "t", "--query", "q", "--reason", "r"}}
			for _, c := range commands {
				runs = append(runs, append([]string{c}, argsOf[c]...))
			}
			for _, args := range runs {
				c := strings.Join(args[:min(2, len(args))], " ")
				out := runFor(t, 8*time.Second, env, args...)
				if strings.Contains(out, secret) {
					t.Errorf("%s printed the secret:\n%s", c, grep(out, secret))
				}
				if regexp.MustCompile(`(?i)panic|goroutine \d+`).MatchString(out) {
					t.Errorf("%s panicked:\n%s", c, tail(out, 20))
				}
			}
		})
	}
}

// runFor runs a command for at most d (then SIGTERM, and SIGKILL 10 s
// later) and returns all it printed.
func runFor(t *testing.T, d time.Duration, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command(binary, args...)
	dieWithTest(cmd)
	cmd.Env = append(cleanEnv(), env...)
	cmd.Dir = t.TempDir()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	return out.String()
}
