//go:build linux

package tests

import (
	"bufio"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/finalizer-dev/finalizer/internal/embeddednats"
	"github.com/finalizer-dev/finalizer/internal/pgcluster/pgtest"
)

// The container image cannot be built where these tests run (no docker
// daemon, no registry). What its stages need is checked instead: the
// build stage's own `go build` command, read from the Dockerfile, gives a
// static binary (no interpreter, no shared library), and that binary
// serves as the image runs it: as uid/gid 65532 when the test runs as root,
// from /, with nothing in its environment but the image's variables and a
// token, against external NATS and PostgreSQL.
func TestContainerBuildStage(t *testing.T) {
	raw, err := os.ReadFile("../deploy/container/Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`RUN (CGO_ENABLED=0 go build [^\n]*?) -o /out/finalizer (\./cmd/finalizer)`).FindStringSubmatch(string(raw))
	if m == nil {
		t.Fatal("the Dockerfile has no `RUN CGO_ENABLED=0 go build ... -o /out/finalizer ./cmd/finalizer` line")
	}
	out := filepath.Join(openDir(t), "finalizer") // reachable by uid 65532
	// As RUN runs it: by the shell, from the build context's root.
	build := exec.Command("/bin/sh", "-c", m[1]+" -o '"+out+"' "+m[2])
	build.Dir = ".."
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("%v: %v\n%s", build.Args, err, b)
	}
	f, err := elf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("the build stage's binary has an interpreter: it is not static")
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("the build stage's binary needs %v", libs)
	}
	f.Close()

	ns, err := embeddednats.Start(embeddednats.Options{Port: embeddednats.RandomPort, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Shutdown()
	cmd := exec.Command(out, "serve")
	cmd.Dir = "/"
	cmd.Env = []string{
		"FINALIZER_HTTP_LISTEN=127.0.0.1:0", // the image's 0.0.0.0:8080, on a free port
		"FINALIZER_HTTP_TOKEN=container-test-token",
		"FINALIZER_NATS_URL=" + ns.ClientURL(),
		"FINALIZER_POSTGRES_URL=" + pgtest.URL(t),
	}
	if os.Geteuid() == 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65532, Gid: 65532}}
	}
	var stderr syncBuffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "finalizer: ready") {
				ready <- true
			}
		}
		close(ready)
	}()
	select {
	case ok := <-ready:
		if !ok {
			_ = cmd.Wait()
			t.Fatalf("serve exited before it was ready\n%s", tail(stderr.String(), 30))
		}
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("serve not ready within 60 s\n%s", tail(stderr.String(), 30))
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	for range ready { // stdout read to its end before Wait
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("serve after SIGTERM: %v\n%s", err, tail(stderr.String(), 30))
	}
}
