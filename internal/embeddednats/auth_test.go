package embeddednats_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/finalizer-dev/finalizer/internal/natstest"
	"github.com/finalizer-dev/finalizer/internal/testpki"

	"github.com/nats-io/nats.go"

	"github.com/finalizer-dev/finalizer/internal/embeddednats"
)

// A test NKey (not a secret: it exists only in this test).
const (
	testNKeySeed = "SUAAE5OXNWCYVXNV6V3BJMDGGZPFDGGUQKPDTNWCNSFFE32BX2VERRWZNA"
	testNKeyPub  = "UC37QVSA5W5K5OC5OECEB2RLZKK3F7FFUMDP3JJXTE27VTQZD4X2IMZR"
)

func TestUsersAndPermissions(t *testing.T) {
	s := start(t, embeddednats.Options{StoreDir: t.TempDir(), Users: []embeddednats.User{
		{Name: "spark", Password: "pub-secret", Permissions: &embeddednats.Permissions{Publish: []string{"spark.>"}}},
		{Name: "ops", Password: "ops-secret", Permissions: &embeddednats.Permissions{
			Publish: []string{"finalizer.api.>"}, Subscribe: []string{"_INBOX.>"}}},
		{Name: "service", Password: "svc-secret"},
		{NKey: testNKeyPub, Permissions: &embeddednats.Permissions{Publish: []string{"spark.>"}}},
	}})
	url := s.ClientURL()

	if _, err := nats.Connect(url); !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("anonymous connect: err = %v, want an authorization error", err)
	}
	if _, err := nats.Connect(url, nats.UserInfo("spark", "wrong")); !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("wrong password: err = %v, want an authorization error", err)
	}

	svc, err := nats.Connect(url, nats.UserInfo("service", "svc-secret"))
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	events, err := svc.SubscribeSync("spark.>")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Subscribe("finalizer.api.track", func(m *nats.Msg) { _ = m.Respond([]byte("ok")) }); err != nil {
		t.Fatal(err)
	}
	if err := svc.Flush(); err != nil {
		t.Fatal(err)
	}

	// A publisher publishes its events and nothing else.
	var pv natstest.Violations
	pub, err := nats.Connect(url, nats.UserInfo("spark", "pub-secret"), nats.ErrorHandler(pv.Handler))
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	if err := pub.Publish("spark.progress.q.r", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if _, err := events.NextMsg(5 * time.Second); err != nil {
		t.Fatalf("the publisher's event did not arrive: %v", err)
	}
	_ = pub.Publish("finalizer.api.track", []byte("{}"))
	_, _ = pub.SubscribeSync("spark.>")
	_ = pub.Flush()
	deadline := time.Now().Add(5 * time.Second)
	for !(pv.Has(`Publish to "finalizer.api.track"`) && pv.Has(`Subscription to "spark.>"`)) {
		if time.Now().After(deadline) {
			t.Fatalf("publisher violations = %v, want publish to the API and subscribe refused", pv.Errors())
		}
		time.Sleep(10 * time.Millisecond)
	}

	// An operator uses the API; an NKey publisher publishes events.
	ops, err := nats.Connect(url, nats.UserInfo("ops", "ops-secret"))
	if err != nil {
		t.Fatal(err)
	}
	defer ops.Close()
	if m, err := ops.Request("finalizer.api.track", []byte("{}"), 5*time.Second); err != nil || string(m.Data) != "ok" {
		t.Fatalf("operator request: %v", err)
	}
	seedFile := filepath.Join(t.TempDir(), "user.nk")
	if err := os.WriteFile(seedFile, []byte(testNKeySeed+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	nkOpt, err := nats.NkeyOptionFromSeed(seedFile)
	if err != nil {
		t.Fatal(err)
	}
	nk, err := nats.Connect(url, nkOpt)
	if err != nil {
		t.Fatalf("nkey login: %v", err)
	}
	defer nk.Close()
	if err := nk.Publish("spark.idle.q.r", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if _, err := events.NextMsg(5 * time.Second); err != nil {
		t.Fatalf("the nkey publisher's event did not arrive: %v", err)
	}
}

func TestBadUsersRefused(t *testing.T) {
	for name, users := range map[string][]embeddednats.User{
		"no password":       {{Name: "a"}},
		"name twice":        {{Name: "a", Password: "x"}, {Name: "a", Password: "y"}},
		"nkey and password": {{NKey: testNKeyPub, Password: "x"}},
		"not a user nkey":   {{NKey: "ABCDEF"}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := embeddednats.Start(embeddednats.Options{Port: embeddednats.RandomPort, StoreDir: t.TempDir(), Users: users})
			if !errors.Is(err, embeddednats.ErrBadAuth) {
				t.Fatalf("err = %v, want ErrBadAuth", err)
			}
		})
	}
}

func TestTLSWithClientCertificates(t *testing.T) {
	pki := testpki.New(t)
	s := start(t, embeddednats.Options{StoreDir: t.TempDir(), TLS: &embeddednats.TLS{
		CertFile: pki.ServerCert, KeyFile: pki.ServerKey, ClientCAFile: pki.CACert}})
	url := s.ClientURL()
	if !strings.HasPrefix(url, "tls://127.0.0.1:") {
		t.Fatalf("ClientURL = %s, want tls://", url)
	}
	if nc, err := nats.Connect(url, nats.RootCAs(pki.CACert)); err == nil {
		nc.Close()
		t.Fatal("a client without a certificate was accepted")
	}
	if nc, err := nats.Connect(strings.Replace(url, "tls://", "nats://", 1)); err == nil {
		nc.Close()
		t.Fatal("a plain-text client was accepted")
	}
	nc, err := nats.Connect(url, nats.RootCAs(pki.CACert), nats.ClientCert(pki.ClientCert, pki.ClientKey))
	if err != nil {
		t.Fatalf("mutual TLS connect: %v", err)
	}
	defer nc.Close()
	if !nc.TLSRequired() {
		t.Error("connection not using TLS")
	}
	if _, err := embeddednats.Start(embeddednats.Options{Port: embeddednats.RandomPort, StoreDir: t.TempDir(),
		TLS: &embeddednats.TLS{CertFile: pki.ServerCert}}); !errors.Is(err, embeddednats.ErrBadAuth) {
		t.Fatalf("tls without a key: err = %v, want ErrBadAuth", err)
	}
}
