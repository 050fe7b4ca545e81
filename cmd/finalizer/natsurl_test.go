package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNATSURLHelpSaysWhereTheDefaultComesFrom: publish, track and join
// --help showed --nats-url (default "nats://127.0.0.1:4222"), while they
// connect to the URL in the data dir's nats-login.json (a serve's embedded
// server on another port) when no --nats-url is given. The help names
// where the URL comes from, and the URL used is that one.
func TestNATSURLHelpSaysWhereTheDefaultComesFrom(t *testing.T) {
	for _, name := range []string{"publish", "track", "join"} {
		_, out, _ := runCLI(t, name, "--help")
		var line string
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, "--nats-url") {
				line = l
			}
		}
		if strings.Contains(line, `(default "`) || !strings.Contains(line, "nats-login.json") || !strings.Contains(line, DefaultNATSURL) {
			t.Errorf("%s --help: %s", name, strings.TrimSpace(line))
		}
	}

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "nats-login.json"),
		[]byte(`{"url":"nats://127.0.0.1:24222","user":"finalizer","password":"pw"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args  []string
		want  string
		login bool
	}{
		{[]string{"--data-dir", t.TempDir()}, DefaultNATSURL, false},
		{[]string{"--data-dir", dir}, "nats://127.0.0.1:24222", true},
		{[]string{"--data-dir", dir, "--nats-url", "nats://localhost:24222"}, "nats://127.0.0.1:24222", true},
		{[]string{"--data-dir", dir, "--nats-url", "nats://elsewhere:4222"}, "nats://elsewhere:4222", false},
		{[]string{"--data-dir", dir, "--nats-user", "me"}, DefaultNATSURL, false},
	} {
		cmd := newTrackCmd(io.Discard) // its NATS flags are publish's and join's (addNATSClientFlags)
		if err := cmd.ParseFlags(tc.args); err != nil {
			t.Fatal(err)
		}
		var c NATSConfig
		applyNATSAuthFlags(cmd.Flags(), &c)
		url, _, login := natsTarget(cmd.Flags(), c)
		if url != tc.want || login != tc.login {
			t.Errorf("%v: %s, login %v; want %s, %v", tc.args, url, login, tc.want, tc.login)
		}
	}
}
