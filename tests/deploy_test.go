//go:build linux

package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
)

// The NATS node configuration of the deployment guide is one nats-server
// accepts: a JetStream cluster of three routes with the ingest buffers set.
func TestDeployNATSConfig(t *testing.T) {
	o, err := server.ProcessConfigFile("../deploy/nats/nats-server.conf")
	if err != nil {
		t.Fatal(err)
	}
	if !o.JetStream || o.Cluster.Name == "" || len(o.Routes) != 3 {
		t.Fatalf("jetstream %v, cluster %q, %d routes; want a JetStream cluster of three", o.JetStream, o.Cluster.Name, len(o.Routes))
	}
	if o.StreamMaxBufferedMsgs != 1_000_000 || o.StreamMaxBufferedSize != 1<<30 {
		t.Fatalf("ingest buffers %d msgs, %d bytes", o.StreamMaxBufferedMsgs, o.StreamMaxBufferedSize)
	}
}

// The systemd unit passes systemd-analyze verify, with its ExecStart
// pointing at the binary under test (the unit's own path is where an
// operator installs it). Skipped where systemd-analyze is not installed.
func TestDeploySystemdUnit(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed")
	}
	unit, err := os.ReadFile("../deploy/systemd/finalizer.service")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Replace(string(unit), "/usr/local/bin/finalizer", binary, 1)
	// The environment file exists only on a configured host.
	text = strings.Replace(text, "EnvironmentFile=/etc/finalizer/finalizer.env", "EnvironmentFile=-/etc/finalizer/finalizer.env", 1)
	path := filepath.Join(t.TempDir(), "finalizer.service")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", path).CombinedOutput()
	// verify also reports on units of the host it runs on; only lines
	// about this unit count.
	var ours []string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "finalizer.service") {
			ours = append(ours, line)
		}
	}
	if len(ours) > 0 || (err != nil && len(strings.TrimSpace(string(out))) == 0) {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}
