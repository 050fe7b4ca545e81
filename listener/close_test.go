package listener_test

import (
	"context"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/finalizer-dev/finalizer/listener"
)

// Closing the listener is not a disconnect: nothing at WARN, nothing
// counted (a restart of the service logged "nats disconnected" at WARN).
func TestCloseIsNotADisconnect(t *testing.T) {
	srv := startNATS(t)
	core, logs := observer.New(zap.InfoLevel)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	l, err := listener.Dial(ctx, listener.Options{URL: srv.ClientURL(), Logger: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	if n := logs.FilterMessage("nats disconnected").Len(); n != 0 {
		t.Fatalf("%d 'nats disconnected' lines after Close: %v", n, logs.All())
	}
	if logs.FilterMessage("nats connection closed").Len() != 1 {
		t.Fatalf("no 'nats connection closed' line: %v", logs.All())
	}
	if d := l.ConnStats().Disconnects; d != 0 {
		t.Fatalf("%d disconnects counted after Close", d)
	}
}
