package listener_test

import (
	"context"
	"testing"
	"time"

	"github.com/finalizer-dev/finalizer/internal/embeddednats"
	"github.com/finalizer-dev/finalizer/listener"
	"github.com/finalizer-dev/finalizer/progress"
)

// A login that may publish events but not use the JetStream API (the
// embedded server's publisher role) still publishes: the stream lookup gets
// no answer, only a permissions violation, and is bounded on its own so
// that the publish keeps the rest of its deadline.
func TestPublishWithoutJetStreamPermission(t *testing.T) {
	s, err := embeddednats.Start(embeddednats.Options{Port: embeddednats.RandomPort, StoreDir: t.TempDir(), Users: []embeddednats.User{
		{Name: "svc", Password: "svc"},
		{Name: "spark", Password: "spark", Permissions: &embeddednats.Permissions{Publish: []string{"spark.>"}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	svc := dial(t, s.ClientURL(), listener.Options{User: "svc", Password: "svc"})
	if err := svc.EnsureStream(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	q, r := uuid(7, 1), uuid(7, 2)
	box := listener.NewMailbox()
	sub, err := svc.Subscribe(q, r, box)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })

	pub := dial(t, s.ClientURL(), listener.Options{User: "spark", Password: "spark", RequestTimeout: 3 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	began := time.Now()
	for b := int64(1); b <= 2; b++ {
		ev := &progress.Event{Kind: progress.KindProgress, QueryID: q, RunID: r}
		if err := pub.Publish(ctx, ev, progressJSON(q, r, "x", b)); err != nil {
			t.Fatalf("publish %d: %v", b, err)
		}
	}
	if d := time.Since(began); d > listener.DefaultStreamLookupTimeout+time.Second {
		t.Errorf("two publishes took %s", d)
	}
	c := newCollector(box)
	c.waitFor(t, "both progress events", func(c *collector) bool { return c.last() == 2 })
}
