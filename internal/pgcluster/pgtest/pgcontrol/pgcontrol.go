// Package pgcontrol gives a test a migrated control table on a fresh
// pgtest database: the setup the commands' and the ownership tests share.
// It is a package of its own because pgtest cannot import control: the
// control package's own tests use pgtest.
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
//	func TestX(t *testing.T) {
//		store, url := pgcontrol.Store(t)
//	}
package pgcontrol

import (
	"context"
	"testing"

	"github.com/finalizer-dev/finalizer/control"
	"github.com/finalizer-dev/finalizer/internal/pgcluster/pgtest"
)

// Store opens a control store (default options) on a fresh database
// (pgtest.URL), closed when the test ends, and migrates it; it returns
// the store and the database's URL. It fails the test if either fails.
func Store(t testing.TB) (*control.Store, string) {
	t.Helper()
	url := pgtest.URL(t)
	s, err := control.Open(context.Background(), url, control.Options{})
	if err != nil {
		t.Fatalf("open the control store: %v", err)
	}
	t.Cleanup(s.Close)
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatalf("migrate the control table: %v", err)
	}
	return s, url
}
