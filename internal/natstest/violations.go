// Package natstest holds NATS test support shared by the packages' tests.
package natstest

import (
	"errors"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
)

// Violations collects the permission violations the server reports to a
// client: pass Handler as nats.ErrorHandler. The zero value is ready.
type Violations struct {
	mu   sync.Mutex
	errs []string
}

// Handler records err when it is a permission violation.
func (v *Violations) Handler(_ *nats.Conn, _ *nats.Subscription, err error) {
	if errors.Is(err, nats.ErrPermissionViolation) {
		v.mu.Lock()
		v.errs = append(v.errs, err.Error())
		v.mu.Unlock()
	}
}

// Has reports whether a recorded violation mentions sub.
func (v *Violations) Has(sub string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, e := range v.errs {
		if strings.Contains(e, sub) {
			return true
		}
	}
	return false
}

// Errors returns the recorded violations.
func (v *Violations) Errors() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]string(nil), v.errs...)
}
