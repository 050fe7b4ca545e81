package main

import (
	"io"
	"os"
	"path/filepath"
	"testing"
)

// TestClientHTTPURLFromConfig: status, is-final and wait given the
// service's --config reach its HTTP API where the config's http.listen
// says (a wildcard host on the loopback), unless --http-url says
// otherwise; "off" means no HTTP API to ask.
func TestClientHTTPURLFromConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	wild := write("wild.yaml", "http:\n  listen: 0.0.0.0:9191\n")
	v6 := write("v6.yaml", "http:\n  listen: \"[::]:9192\"\n")
	host := write("host.yaml", "http:\n  listen: 127.0.0.2:9193\n")
	off := write("off.yaml", "http:\n  listen: \"off\"\n")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, DefaultHTTPURL},
		{[]string{"--config", wild}, "http://127.0.0.1:9191"},
		{[]string{"--config", v6}, "http://[::1]:9192"},
		{[]string{"--config", host}, "http://127.0.0.2:9193"},
		{[]string{"--config", off}, ""},
		{[]string{"--config", wild, "--http-url", "http://elsewhere:1"}, "http://elsewhere:1"},
	} {
		for _, cmd := range []string{"status", "is-final", "wait"} {
			cc := newStatusCmd(io.Discard)
			switch cmd {
			case "is-final":
				cc = newIsFinalCmd(io.Discard)
			case "wait":
				cc = newWaitCmd(io.Discard)
			}
			if err := cc.ParseFlags(tc.args); err != nil {
				t.Fatal(err)
			}
			got, err := resolveClient(cc.Flags())
			if err != nil {
				t.Fatal(err)
			}
			if got.httpURL != tc.want {
				t.Errorf("%s %v: HTTP API %q, want %q", cmd, tc.args, got.httpURL, tc.want)
			}
		}
	}
}
