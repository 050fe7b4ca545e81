package pyspark_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"go.uber.org/goleak"

	"github.com/finalizer-dev/finalizer/internal/embeddednats"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testTimeout bounds one run of the Python tests.
const testTimeout = 3 * time.Minute

// python returns the interpreter that runs the tests: $FINALIZER_PYTHON or
// python3 on PATH, at least 3.7. Without one the test is skipped, unless
// FINALIZER_REQUIRE_PYTHON=1 (CI): then it fails.
func python(t *testing.T) string {
	t.Helper()
	missing := func(format string, args ...any) {
		t.Helper()
		if os.Getenv("FINALIZER_REQUIRE_PYTHON") == "1" {
			t.Fatalf(format+" (FINALIZER_REQUIRE_PYTHON=1)", args...)
		}
		t.Skipf(format, args...)
	}
	py := os.Getenv("FINALIZER_PYTHON")
	if py == "" {
		var err error
		if py, err = exec.LookPath("python3"); err != nil {
			missing("python3 not found: %v", err)
			return ""
		}
	}
	out, err := exec.Command(py, "-c", "import sys; print('%d.%d' % sys.version_info[:2]); sys.exit(sys.version_info < (3, 7))").CombinedOutput()
	if err != nil {
		missing("%s is not a usable Python 3.7+: %v: %s", py, err, out)
	}
	t.Logf("python %s (%s)", strings.TrimSpace(string(out)), py)
	return py
}

// unittest returns the command that runs Python unittest modules from
// tests/ with the stand-in pyspark and the client on PYTHONPATH, env added,
// and FINALIZER_TEST_STRICT=1 so that a test missing its server fails.
func unittest(t *testing.T, py string, env []string, modules ...string) *exec.Cmd {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	args := append([]string{"-m", "unittest", "-v"}, modules...)
	cmd := exec.CommandContext(ctx, py, args...)
	cmd.Dir = "tests"
	cmd.Env = append(os.Environ(),
		"PYTHONPATH="+strings.Join([]string{abs(t, "tests/stub"), abs(t, "."), abs(t, "tests")}, string(os.PathListSeparator)),
		"PYTHONDONTWRITEBYTECODE=1",
		"PYTHONUNBUFFERED=1",
		"FINALIZER_TEST_STRICT=1",
	)
	cmd.Env = append(cmd.Env, env...)
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// run runs cmd to its end and reports its output.
func run(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	report(t, err, &out)
}

func report(t *testing.T, err error, out *bytes.Buffer) {
	t.Helper()
	if err != nil {
		t.Fatalf("python tests failed: %v\n%s", err, out)
	}
	if strings.Contains(out.String(), "skipped") {
		t.Fatalf("python tests skipped some cases:\n%s", out)
	}
	t.Logf("python tests:\n%s", out)
}

func abs(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestPythonUnit runs the tests that need no server: payloads, subjects, the
// drop policy of the bounded queue, callbacks and close() while no server
// answers, and the watchdog against the stand-in Spark Connect listener bus.
func TestPythonUnit(t *testing.T) {
	py := python(t)
	run(t, unittest(t, py, nil, "test_unit", "test_down", "test_watchdog"))
}

// TestPythonAgainstNATS runs the listener against real nats-servers: the
// embedded one finalizer serves, one requiring a user and password, one
// requiring a token, one requiring TLS; and drive.py on the real Spark event
// log.
func TestPythonAgainstNATS(t *testing.T) {
	py := python(t)
	embedded := startEmbedded(t, t.TempDir(), embeddednats.RandomPort)
	userSrv := startServer(t, &server.Options{Username: "spark", Password: "s3cr3t:@/"})
	tokenSrv := startServer(t, &server.Options{Authorization: "t0ken"})
	caFile, tlsConf := testTLS(t)
	tlsSrv := startServer(t, &server.Options{TLSConfig: tlsConf, TLSTimeout: 5})

	env := []string{
		"FINALIZER_NATS_URL=" + embedded.ClientURL(),
		"FINALIZER_NATS_USER_URL=" + userSrv.ClientURL(),
		"FINALIZER_NATS_USER=spark",
		"FINALIZER_NATS_PASSWORD=s3cr3t:@/",
		"FINALIZER_NATS_TOKEN_URL=" + tokenSrv.ClientURL(),
		"FINALIZER_NATS_TOKEN=t0ken",
		"FINALIZER_NATS_TLS_URL=" + tlsSrv.ClientURL(),
		"FINALIZER_NATS_TLS_CA=" + caFile,
		"FINALIZER_SPARK_EVENTS=" + abs(t, "../../internal/eventlog/testdata/local-1596020211915.streaming.jsonl"),
	}
	run(t, unittest(t, py, env, "test_nats"))
}

// TestPythonReconnect restarts the embedded server on the same port and
// store while the Python side keeps publishing. The two sides talk through
// files in a directory: Python writes "stop" or "start", this test does it
// and answers "stopped" or "started".
func TestPythonReconnect(t *testing.T) {
	py := python(t)
	store := t.TempDir()
	srv := startEmbedded(t, store, embeddednats.RandomPort)
	u, err := url.Parse(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatal(err)
	}
	ctl := t.TempDir()
	cmd := unittest(t, py, []string{"FINALIZER_NATS_URL=" + srv.ClientURL(), "FINALIZER_TEST_CTL=" + ctl}, "test_restart")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()

	asked := func(name string) bool {
		_, err := os.Stat(filepath.Join(ctl, name))
		return err == nil
	}
	answer := func(name string) {
		if err := os.WriteFile(filepath.Join(ctl, name), []byte(name), 0o644); err != nil {
			t.Error(err)
		}
	}
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	stopped, started := false, false
	for {
		select {
		case err := <-done:
			if !stopped || !started {
				t.Errorf("python side finished without asking for the restart (stop %v, start %v)", stopped, started)
			}
			report(t, err, &out)
			return
		case <-tick.C:
		}
		if !stopped && asked("stop") {
			srv.Shutdown()
			stopped = true
			answer("stopped")
		}
		if stopped && !started && asked("start") {
			srv = startEmbedded(t, store, port)
			started = true
			answer("started")
		}
	}
}

// startEmbedded starts finalizer's embedded nats-server (JetStream on).
func startEmbedded(t *testing.T, store string, port int) *embeddednats.Server {
	t.Helper()
	s, err := embeddednats.Start(embeddednats.Options{Port: port, StoreDir: store})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	return s
}

// startServer starts a plain nats-server with o's authentication or TLS on
// a random loopback port.
func startServer(t *testing.T, o *server.Options) *server.Server {
	t.Helper()
	o.Host, o.Port, o.NoSigs, o.NoLog = "127.0.0.1", server.RANDOM_PORT, true, true
	s, err := server.NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	return s
}

// testTLS makes a CA and a server certificate for 127.0.0.1 and returns the
// CA's PEM file and the server's TLS configuration.
func testTLS(t *testing.T) (string, *tls.Config) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "finalizer test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames:     []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	return caFile, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
}
