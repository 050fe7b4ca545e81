package tests

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/finalizer-dev/finalizer/internal/pgcluster/pgtest"
)

// TestBcryptHashInConfigFile (issue 9, item 1): a real bcrypt hash as an
// embedded user's password in the config file. Before, the file was
// expanded as a whole before parsing, this hash became the password "a1",
// and a publisher logged in with it. Now the right password logs in and
// "a1" does not.
func TestBcryptHashInConfigFile(t *testing.T) {
	const password = "spark-b6c1f0e9d2"
	const hash = "$2a$11$JSzmxqqqvgjvT5KxSGZhJeRlXaj6aQK6InAzlVnSwAjQ9YGTZgE2O" // of password; "a1" once mangled
	config := `
nats:
  embedded:
    users:
      - {user: spark, password: ` + hash + `, role: publisher}
`
	s := startServe(t, serveOpts{pgURL: pgtest.URL(t), config: config})
	nc, err := nats.Connect(s.natsURL, nats.UserInfo("spark", password))
	if err != nil {
		t.Fatalf("the right password: %v", err)
	}
	nc.Close()
	if nc, err := nats.Connect(s.natsURL, nats.UserInfo("spark", "a1")); !errors.Is(err, nats.ErrAuthorization) {
		if nc != nil {
			nc.Close()
		}
		t.Fatalf(`"a1": err = %v, want an authorization error`, err)
	}
}
