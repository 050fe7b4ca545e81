package listener

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckFilesNamesTheKey: each NATS client file that cannot be read or
// parsed is reported by its config key before any dial; no files, no error.
func TestCheckFilesNamesTheKey(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing")
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := (Options{}).CheckFiles(); err != nil {
		t.Errorf("no files: %v", err)
	}
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{TLSCAFile: missing}, "nats.tls_ca_file " + missing},
		{Options{TLSCAFile: notPEM}, "nats.tls_ca_file " + notPEM},
		{Options{TLSCertFile: notPEM}, "needs both a cert and a key file"},
		{Options{TLSCertFile: notPEM, TLSKeyFile: notPEM}, "nats.tls_cert_file " + notPEM},
		{Options{NKeySeedFile: missing}, "nats.nkey_seed_file " + missing},
		{Options{CredsFile: missing}, "nats.credentials_file"},
	} {
		err := c.o.CheckFiles()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.o, err, c.want)
		}
	}
}
