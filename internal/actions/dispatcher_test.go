package actions

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/finalizer-dev/finalizer/control"
	"github.com/finalizer-dev/finalizer/progress"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeOutbox is an Outbox in memory: moves in, sends out, heads first per
// table.
type fakeOutbox struct {
	mu    sync.Mutex
	moves []control.Move
	sends []*fakeSend
}

type fakeSend struct {
	control.Send
	state string
	next  time.Time
}

func (f *fakeOutbox) Expand(_ context.Context, _ int, _ map[string]int, expand func(control.Move) ([]control.Send, error)) (control.ExpandResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	res := control.ExpandResult{Queued: map[string]int{}, Dead: map[string]int{}}
	for _, m := range f.moves {
		ss, err := expand(m)
		if err != nil {
			return res, err
		}
		for _, s := range ss {
			f.sends = append(f.sends, &fakeSend{Send: s, state: control.SendPending})
			res.Queued[s.Action]++
		}
		res.Moves++
	}
	f.moves = nil
	return res, nil
}

func (f *fakeOutbox) Deliver(ctx context.Context, action string, limit int, deliver func(context.Context, []control.Send) []control.Outcome) (control.DeliverResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var heads []*fakeSend
	seen := map[string]bool{}
	for _, s := range f.sends {
		if s.Action != action || s.state != control.SendPending || seen[s.Table] {
			continue
		}
		seen[s.Table] = true
		if !s.next.After(time.Now()) && len(heads) < limit {
			heads = append(heads, s)
		}
	}
	var res control.DeliverResult
	if len(heads) == 0 {
		return res, nil
	}
	in := make([]control.Send, len(heads))
	for i, h := range heads {
		in[i] = h.Send
	}
	out := deliver(ctx, in)
	res.Claimed = len(heads)
	for i, o := range out {
		h := heads[i]
		h.Attempts++
		switch {
		case o.Err == nil:
			h.state = control.SendDelivered
			res.Delivered++
		case o.Dead:
			h.state = control.SendDead
			res.Dead++
		default:
			h.next = o.RetryAt
			res.Failed++
		}
	}
	return res, nil
}

func (f *fakeOutbox) Purge(context.Context, time.Time, time.Time) (int64, error) { return 0, nil }
func (f *fakeOutbox) Totals(context.Context) (map[string]control.ActionTotals, error) {
	return map[string]control.ActionTotals{}, nil
}

// fakePublisher records messages; it fails the first `fail` of them.
type fakePublisher struct {
	mu   sync.Mutex
	fail int
	got  []Message
}

func (p *fakePublisher) PublishFinal(_ context.Context, msgs []Message) []error {
	p.mu.Lock()
	defer p.mu.Unlock()
	errs := make([]error, len(msgs))
	for i, m := range msgs {
		if p.fail > 0 {
			p.fail--
			errs[i] = errors.New("no ack")
			continue
		}
		p.got = append(p.got, m)
	}
	return errs
}

func (p *fakePublisher) messages() []Message {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Message(nil), p.got...)
}

// TestDispatcherInOrderWithRetries: a jump over three periods is
// published in order on the table's subject, a failed publish is retried
// before the next period, and Close stops every goroutine (goleak).
func TestDispatcherInOrderWithRetries(t *testing.T) {
	as, err := Build("tables[0].actions", []Config{{NATS: &NATSConfig{}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	as[0].retry = retryPolicy{initial: time.Millisecond, max: 5 * time.Millisecond, attempts: 10}
	rules := []Rule{{Table: "bronze.{name}", Granularity: progress.Hour, Location: time.UTC, Actions: as}}
	if err := Name(rules); err != nil {
		t.Fatal(err)
	}
	ob := &fakeOutbox{}
	pub := &fakePublisher{fail: 2}
	d, err := Start(Options{Outbox: ob, Rules: rules, Publisher: pub, SubjectPrefix: "finalizer.api.final", PollInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	at := func(h int) time.Time { return time.Date(2026, 9, 28, h, 0, 0, 0, time.UTC) }
	ob.mu.Lock()
	ob.moves = []control.Move{
		{Table: "bronze.orders", From: at(12), To: at(15), RunID: "r"},
		{Table: "silver.x", From: at(12), To: at(15)}, // no rule: no events
	}
	ob.mu.Unlock()
	d.Wake()
	deadline := time.Now().Add(10 * time.Second)
	for len(pub.messages()) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("published %d of 3", len(pub.messages()))
		}
		time.Sleep(5 * time.Millisecond)
	}
	got := pub.messages()
	for i, m := range got {
		want := EventID("bronze.orders", at(12+i), 0)
		if m.ID != want || m.Subject != "finalizer.api.final.bronze.orders" {
			t.Errorf("message %d: %s on %s, want %s", i, m.ID, m.Subject, want)
		}
	}
	d.Close()
	d.Close() // safe twice
}

func TestBuildErrorsNameTheField(t *testing.T) {
	env := func(k string) string {
		if k == "SET" {
			return "x"
		}
		return ""
	}
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "f[0]: invalid action: no kind"},
		{Config{NATS: &NATSConfig{}, Webhook: &WebhookConfig{}}, "f[0]: invalid action: nats and webhook in one entry"},
		{Config{Webhook: &WebhookConfig{URL: "http://h/", SecretEnv: "UNSET"}}, "f[0].webhook.secret_env: invalid action: the environment variable UNSET is not set or empty"},
		{Config{Webhook: &WebhookConfig{URL: "http://h/", SecretEnv: "SET", Timeout: "x"}}, `f[0].webhook.timeout "x"`},
		{Config{Webhook: &WebhookConfig{URL: "h", SecretEnv: "SET"}}, "f[0].webhook.url"},
		{Config{Marker: &MarkerConfig{Path: "rel/{table}"}}, "f[0].marker.path"},
		{Config{Marker: &MarkerConfig{Path: "/proc/finalizer-test/{table}/_SUCCESS"}}, "f[0].marker.path: invalid action: directory /proc/finalizer-test cannot be created"},
	} {
		_, err := Build("f", []Config{c.cfg}, env)
		if err == nil || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.cfg, err, c.want)
		}
	}
}
