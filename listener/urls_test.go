package listener_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/finalizer-dev/finalizer/listener"
)

// TestDialURLThatDoesNotParse: a NATS URL that url.Parse refuses fails at
// once (it was retried until the deadline, as a network error), and the
// error never holds its password (url.Error's text holds the whole URL).
func TestDialURLThatDoesNotParse(t *testing.T) {
	const secret = "Hunter2SecretPw"
	for _, u := range []string{
		"nats://u:" + secret + "@[bad",
		"nats://127.0.0.1:4222, nats://u:" + secret + "@host:port",
		"nats://" + secret + "@[::1",
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		start := time.Now()
		_, err := listener.Dial(ctx, listener.Options{URL: u})
		cancel()
		if err == nil {
			t.Fatalf("Dial(%q) = nil error", u)
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("Dial(%q): the error holds the password: %v", u, err)
		}
		if !strings.Contains(err.Error(), "does not parse") {
			t.Errorf("Dial(%q): %v: want an error that says the URL does not parse", u, err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("Dial(%q) took %v: a URL that does not parse must fail at once", u, d)
		}
	}
}
