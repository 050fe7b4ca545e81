package embeddednats_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/crypto/bcrypt"

	"github.com/finalizer-dev/finalizer/internal/embeddednats"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// start starts a server on a random port and shuts it down at the end of
// the test.
func start(t *testing.T, o embeddednats.Options) *embeddednats.Server {
	t.Helper()
	if o.Port == 0 {
		o.Port = embeddednats.RandomPort
	}
	s, err := embeddednats.Start(o)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(s.Shutdown)
	return s
}

// connect returns a JetStream context on a client connection closed at the
// end of the test.
func connect(t *testing.T, url string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	return nc, js
}

func TestStartServesJetStreamOnChosenPort(t *testing.T) {
	s := start(t, embeddednats.Options{StoreDir: t.TempDir()})
	url := s.ClientURL()
	if !strings.HasPrefix(url, "nats://127.0.0.1:") || strings.HasSuffix(url, ":-1") {
		t.Fatalf("ClientURL = %q, want nats://127.0.0.1:<port>", url)
	}
	_, js := connect(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := js.AccountInfo(ctx); err != nil {
		t.Fatalf("AccountInfo: %v (JetStream not enabled?)", err)
	}
}

func TestRestartOnSameStoreKeepsStreamsAndMessages(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	s1, err := embeddednats.Start(embeddednats.Options{Port: embeddednats.RandomPort, StoreDir: dir})
	if err != nil {
		t.Fatalf("first Start: %v", err)
	}
	nc1, js1 := connect(t, s1.ClientURL())
	if _, err := js1.CreateStream(ctx, jetstream.StreamConfig{
		Name: "KEEP", Subjects: []string{"keep.>"}, Storage: jetstream.FileStorage,
	}); err != nil {
		t.Fatalf("CreateStream: %v", err)
	}
	for i := 1; i <= 3; i++ {
		if _, err := js1.Publish(ctx, "keep.a", []byte("m"+strconv.Itoa(i))); err != nil {
			t.Fatalf("Publish: %v", err)
		}
	}
	nc1.Close()
	s1.Shutdown()

	s2 := start(t, embeddednats.Options{StoreDir: dir})
	_, js2 := connect(t, s2.ClientURL())
	st, err := js2.Stream(ctx, "KEEP")
	if err != nil {
		t.Fatalf("stream after restart: %v", err)
	}
	if n := st.CachedInfo().State.Msgs; n != 3 {
		t.Fatalf("messages after restart = %d, want 3", n)
	}
	last, err := st.GetLastMsgForSubject(ctx, "keep.a")
	if err != nil {
		t.Fatalf("GetLastMsgForSubject: %v", err)
	}
	if string(last.Data) != "m3" {
		t.Fatalf("last message = %q, want m3", last.Data)
	}
}

func TestStartErrors(t *testing.T) {
	t.Run("port in use names the address", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		port := ln.Addr().(*net.TCPAddr).Port
		_, err = embeddednats.Start(embeddednats.Options{Port: port, StoreDir: t.TempDir()})
		if err == nil {
			t.Fatal("Start on a busy port succeeded")
		}
		if want := "127.0.0.1:" + strconv.Itoa(port); !strings.Contains(err.Error(), want) {
			t.Fatalf("error %q does not name %s", err, want)
		}
	})
	t.Run("store dir required", func(t *testing.T) {
		_, err := embeddednats.Start(embeddednats.Options{Port: embeddednats.RandomPort})
		if !errors.Is(err, embeddednats.ErrNoStoreDir) {
			t.Fatalf("err = %v, want ErrNoStoreDir", err)
		}
	})
	t.Run("store dir in use", func(t *testing.T) {
		dir := t.TempDir()
		start(t, embeddednats.Options{StoreDir: dir})
		s, err := embeddednats.Start(embeddednats.Options{Port: embeddednats.RandomPort, StoreDir: dir})
		if !errors.Is(err, embeddednats.ErrStoreInUse) {
			if s != nil {
				s.Shutdown()
			}
			t.Fatalf("second Start on one store: err = %v, want ErrStoreInUse", err)
		}
	})
}

func TestShutdownTwiceReleasesStore(t *testing.T) {
	dir := t.TempDir()
	s, err := embeddednats.Start(embeddednats.Options{Port: embeddednats.RandomPort, StoreDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	s.Shutdown()
	s.Shutdown()
	// The store is free again.
	start(t, embeddednats.Options{StoreDir: dir})
}

func TestServerLogsGoToZap(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	start(t, embeddednats.Options{StoreDir: t.TempDir(), Logger: zap.New(core)})
	ready := logs.FilterMessage("Server is ready").All()
	if len(ready) != 1 {
		t.Fatalf("got %d %q lines, want 1; all: %v", len(ready), "Server is ready", logs.All())
	}
	e := ready[0]
	// nats-server's notices (its 25-line banner) are debug: the service's
	// INFO log has one line of its own when the server is ready.
	if e.Level != zapcore.DebugLevel {
		t.Errorf("level = %v, want debug", e.Level)
	}
	if got := e.ContextMap()["component"]; got != "nats-server" {
		t.Errorf("component = %v, want nats-server", got)
	}
	// At info, the server says one line of its own.
	infoCore, infoLogs := observer.New(zapcore.InfoLevel)
	start(t, embeddednats.Options{StoreDir: t.TempDir(), Logger: zap.New(infoCore)})
	for _, l := range infoLogs.All() {
		if !strings.HasPrefix(l.Message, "embedded nats-server ") {
			t.Errorf("an info logger got %v %q", l.Level, l.Message)
		}
	}
}

// The server keeps a bcrypt hash of each plaintext password, not the
// password: it logs no "Plaintext passwords detected" warning at start, the
// password still logs in and a wrong one does not; a hash given as the
// password is taken as a hash.
func TestPasswordsAreKeptHashed(t *testing.T) {
	hash, err := bcrypt.GenerateFromPassword([]byte("given-as-hash"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zapcore.DebugLevel)
	s := start(t, embeddednats.Options{StoreDir: t.TempDir(), Logger: zap.New(core), Users: []embeddednats.User{
		{Name: "plain", Password: "a-plain-secret"},
		{Name: "hashed", Password: string(hash)},
	}})
	for _, l := range logs.All() {
		if strings.Contains(l.Message, "Plaintext password") {
			t.Errorf("the server warns: %q", l.Message)
		}
	}
	for _, c := range []struct {
		user, pw string
		ok       bool
	}{
		{"plain", "a-plain-secret", true},
		{"plain", "a-plain-secreT", false},
		{"hashed", "given-as-hash", true},
		{"hashed", string(hash), false},
	} {
		nc, err := nats.Connect(s.ClientURL(), nats.UserInfo(c.user, c.pw))
		if c.ok != (err == nil) {
			t.Errorf("%s with %q: err = %v, want ok=%v", c.user, c.pw, err, c.ok)
		}
		if err == nil {
			nc.Close()
		}
	}
}
