package actions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/finalizer-dev/finalizer/control"
)

// Defaults of a Dispatcher.
const (
	// DefaultPollInterval is how often a Dispatcher looks for moves and
	// due retries without being woken.
	DefaultPollInterval = time.Second
	// DefaultRetention is how long delivered events are kept (an operator
	// can see them; ids are deterministic, so nothing depends on them).
	DefaultRetention = 24 * time.Hour
	// DefaultDeadRetention is how long dead-lettered events are kept.
	DefaultDeadRetention = 7 * 24 * time.Hour
	// expandLimit and deliverLimit bound one transaction's work.
	expandLimit  = 500
	deliverLimit = 256
	purgeEvery   = 10 * time.Minute
)

// Outbox is what a Dispatcher needs of the control database
// (control.Outbox).
type Outbox interface {
	Expand(ctx context.Context, limit int, maxPending map[string]int, expand func(control.Move) ([]control.Send, error)) (control.ExpandResult, error)
	Deliver(ctx context.Context, action string, limit int, deliver func(context.Context, []control.Send) []control.Outcome) (control.DeliverResult, error)
	Purge(ctx context.Context, done, dead time.Time) (int64, error)
	Totals(ctx context.Context) (map[string]control.ActionTotals, error)
}

var _ Outbox = (*control.Outbox)(nil)

// Options configure a Dispatcher.
type Options struct {
	Outbox Outbox
	// Rules are the rules with their actions, in config order: a table's
	// actions are those of the first rule whose table template names it.
	Rules []Rule
	// Publisher publishes the nats action's events; required when a rule
	// has one.
	Publisher Publisher
	// SubjectPrefix is where the nats action publishes: <api prefix>.final.
	SubjectPrefix string
	// Markers writes markers; nil = FileMarkers.
	Markers MarkerWriter
	// HTTPClient posts webhooks; nil = a client of its own that follows
	// no redirect.
	HTTPClient *http.Client
	// Logger; nil discards.
	Logger *zap.Logger
	// Registerer receives the metrics; nil = none.
	Registerer prometheus.Registerer
	// Now is the clock; nil = time.Now.
	Now func() time.Time
	// PollInterval; zero = DefaultPollInterval.
	PollInterval time.Duration
	// Retention and DeadRetention; zero = the defaults.
	Retention, DeadRetention time.Duration
}

// Dispatcher expands the outbox's moves into events and delivers them:
// one goroutine expands, one per action delivers. Start it with Start,
// stop it with Close.
type Dispatcher struct {
	o       Options
	log     *zap.Logger
	rules   []compiledRule
	actions map[string]*Action // by key
	wakeExp chan struct{}
	wakeAct map[string]chan struct{}
	m       *metrics

	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once
}

type compiledRule struct {
	*Rule
	match *regexp.Regexp
}

// Start validates o and starts the dispatcher's goroutines.
func Start(o Options) (*Dispatcher, error) {
	if o.Outbox == nil {
		return nil, errors.New("actions: no outbox")
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.PollInterval <= 0 {
		o.PollInterval = DefaultPollInterval
	}
	if o.Retention <= 0 {
		o.Retention = DefaultRetention
	}
	if o.DeadRetention <= 0 {
		o.DeadRetention = DefaultDeadRetention
	}
	if o.Markers == nil {
		o.Markers = FileMarkers{}
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	d := &Dispatcher{o: o, log: o.Logger, actions: map[string]*Action{}, wakeExp: make(chan struct{}, 1), wakeAct: map[string]chan struct{}{}}
	for i := range o.Rules {
		r := &o.Rules[i]
		d.rules = append(d.rules, compiledRule{Rule: r, match: templateRegexp(r.Table)})
		for _, a := range r.Actions {
			if a.Kind == KindNATS && o.Publisher == nil {
				return nil, fmt.Errorf("actions: rule %q has a nats action and there is no NATS publisher", r.Table)
			}
			if _, ok := d.actions[a.Key]; !ok {
				d.actions[a.Key] = a
				d.wakeAct[a.Key] = make(chan struct{}, 1)
			}
		}
	}
	m, err := newMetrics(o.Registerer, d)
	if err != nil {
		return nil, err
	}
	d.m = m
	ctx, cancel := context.WithCancel(context.Background())
	d.cancel = cancel
	d.wg.Add(1)
	go d.expandLoop(ctx)
	for key, a := range d.actions {
		d.wg.Add(1)
		go d.deliverLoop(ctx, key, a)
	}
	return d, nil
}

// Close stops the goroutines and waits for them: a delivery in flight is
// abandoned (its transaction rolls back and the event stays pending).
// Safe to call twice.
func (d *Dispatcher) Close() {
	d.closeOnce.Do(func() {
		d.cancel()
		d.wg.Wait()
		d.m.unregister()
	})
}

// Wake makes the dispatcher look at the outbox now (a move was
// announced). It never blocks.
func (d *Dispatcher) Wake() {
	select {
	case d.wakeExp <- struct{}{}:
	default:
	}
}

// ActionNames maps each action's key to its name.
func (d *Dispatcher) ActionNames() map[string]string {
	out := make(map[string]string, len(d.actions))
	for k, a := range d.actions {
		out[k] = a.Name
	}
	return out
}

// ruleFor returns the first rule whose table template names table.
func (d *Dispatcher) ruleFor(table string) *Rule {
	for _, r := range d.rules {
		if r.match.MatchString(table) {
			return r.Rule
		}
	}
	return nil
}

// templateRegexp matches the names a table template can give: each
// {name} or {id} any text, every other character itself.
func templateRegexp(template string) *regexp.Regexp {
	re := regexp.QuoteMeta(template)
	re = strings.NewReplacer(`\{name\}`, "(?s:.*)", `\{id\}`, "(?s:.*)").Replace(re)
	return regexp.MustCompile("^" + re + "$")
}

// Patterns returns the LIKE patterns of the tables of rules with actions
// (control.Outbox.SetActionTables).
func Patterns(rules []Rule) []string {
	var out []string
	for _, r := range rules {
		if len(r.Actions) > 0 {
			out = append(out, control.TablePattern(r.Table))
		}
	}
	return out
}

// spareConns are the outbox connections beyond one per action: the
// expansion of moves, and the scrape-time gauges and status reads.
const spareConns = 3

// Connections is the outbox pool that rules need (control.OutboxOptions.
// MaxConns): each action delivers in a transaction held for as long as its
// delivery takes (a hanging webhook: its timeout, per table), so each
// action needs a connection of its own, or a few slow endpoints would take
// every connection and hold the other actions, the expansion of new moves
// and the gauges.
func Connections(rules []Rule) int32 {
	keys := map[string]bool{}
	for _, r := range rules {
		for _, a := range r.Actions {
			keys[a.Key] = true
		}
	}
	return int32(len(keys) + spareConns)
}

func (d *Dispatcher) expandMove(m control.Move) ([]control.Send, error) {
	r := d.ruleFor(m.Table)
	if r == nil || len(r.Actions) == 0 {
		return nil, nil
	}
	build := expand
	if !m.From.IsZero() && m.To.Before(m.From) {
		build = withdraw // a rewind
	}
	sends, skipped, err := build(r, m)
	if skipped > 0 {
		d.log.Warn("a move spans more periods than are announced; the oldest are not",
			zap.String("table", m.Table), zap.Int("announced", len(sends)/max(1, len(r.Actions))), zap.Int("not_announced", skipped))
	}
	return sends, err
}

// wait blocks until a wake, the poll interval, or ctx's end; false on
// the end.
func (d *Dispatcher) wait(ctx context.Context, wake <-chan struct{}) bool {
	return d.waitFor(ctx, wake, d.o.PollInterval)
}

// waitFor is wait with its own interval.
func (d *Dispatcher) waitFor(ctx context.Context, wake <-chan struct{}, interval time.Duration) bool {
	t := time.NewTimer(interval)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-wake:
	case <-t.C:
	}
	return true
}

func (d *Dispatcher) expandLoop(ctx context.Context) {
	defer d.wg.Done()
	maxPending := map[string]int{}
	for k, a := range d.actions {
		maxPending[k] = a.MaxPending
	}
	var lastPurge time.Time
	failing := false
	for {
		res, err := d.o.Outbox.Expand(ctx, expandLimit, maxPending, d.expandMove)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			if !failing {
				d.log.Warn("could not read the actions' outbox; retrying", zap.Error(err))
			}
			failing = true
		default:
			if failing {
				d.log.Info("the actions' outbox is read again")
			}
			failing = false
			for k, n := range res.Dead {
				if a := d.actions[k]; a != nil && n > 0 {
					d.m.dead.WithLabelValues(a.Name, a.Kind).Add(float64(n))
					d.log.Error("an action's queue is full: events dead-lettered at once",
						zap.String("action", a.Name), zap.Int("events", n), zap.Int("max_pending", a.MaxPending))
				}
			}
			for k, n := range res.Queued {
				if n > 0 {
					if ch := d.wakeAct[k]; ch != nil {
						select {
						case ch <- struct{}{}:
						default:
						}
					}
				}
			}
			if res.Moves >= expandLimit {
				continue
			}
		}
		if now := d.o.Now(); now.Sub(lastPurge) >= purgeEvery {
			lastPurge = now
			if n, err := d.o.Outbox.Purge(ctx, now.Add(-d.o.Retention), now.Add(-d.o.DeadRetention)); err != nil && ctx.Err() == nil {
				d.log.Warn("could not purge old action events", zap.Error(err))
			} else if n > 0 {
				d.log.Debug("purged old action events", zap.Int64("events", n))
			}
		}
		if !d.wait(ctx, d.wakeExp) {
			return
		}
	}
}

func (d *Dispatcher) deliverLoop(ctx context.Context, key string, a *Action) {
	defer d.wg.Done()
	failing := false
	var soonest time.Time // the earliest retry scheduled and not yet due
	for {
		if !soonest.IsZero() && !soonest.After(d.o.Now()) {
			soonest = time.Time{}
		}
		res, err := d.o.Outbox.Deliver(ctx, key, deliverLimit, func(ctx context.Context, sends []control.Send) []control.Outcome {
			out := d.deliver(ctx, a, sends)
			for _, oc := range out {
				if oc.Err != nil && !oc.Dead && (soonest.IsZero() || oc.RetryAt.Before(soonest)) {
					soonest = oc.RetryAt
				}
			}
			return out
		})
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			if !failing {
				d.log.Warn("could not claim an action's events; retrying", zap.String("action", a.Name), zap.Error(err))
			}
			failing = true
		default:
			failing = false
			if res.Delivered+res.Dead > 0 {
				continue // the next event of each table may be due now
			}
		}
		wait := d.o.PollInterval
		if !soonest.IsZero() {
			wait = min(wait, max(time.Millisecond, soonest.Sub(d.o.Now())))
		}
		if !d.waitFor(ctx, d.wakeAct[key], wait) {
			return
		}
	}
}

// deliver delivers sends (the oldest pending event of distinct tables)
// for action a and says what became of each.
func (d *Dispatcher) deliver(ctx context.Context, a *Action, sends []control.Send) []control.Outcome {
	errs := make([]error, len(sends))
	switch a.Kind {
	case KindNATS:
		msgs := make([]Message, len(sends))
		for i, s := range sends {
			msgs[i] = Message{Subject: Subject(d.o.SubjectPrefix, s.Table), ID: s.EventID, Data: s.Payload}
		}
		errs = d.o.Publisher.PublishFinal(ctx, msgs)
	case KindWebhook:
		for i, s := range sends {
			errs[i] = a.webhook.post(ctx, d.o.HTTPClient, s.EventID, s.Payload, d.o.Now())
		}
	case KindMarker:
		for i, s := range sends {
			r := d.ruleFor(s.Table)
			if r == nil {
				errs[i] = fmt.Errorf("no rule names table %q any more", s.Table)
				continue
			}
			path := MarkerPath(a.marker, s.Table, s.PeriodStart, r.Granularity, r.Location)
			var ev struct {
				Withdrawn bool `json:"withdrawn"`
			}
			if err := json.Unmarshal(s.Payload, &ev); err != nil {
				errs[i] = fmt.Errorf("read the event: %w", err)
				continue
			}
			if ev.Withdrawn {
				errs[i] = d.o.Markers.RemoveMarker(ctx, path)
			} else {
				errs[i] = d.o.Markers.WriteMarker(ctx, path, s.Payload)
			}
		}
	}
	out := make([]control.Outcome, len(sends))
	now := d.o.Now()
	for i, s := range sends {
		err := errs[i]
		log := d.log.With(zap.String("action", a.Name), zap.String("table", s.Table), zap.String("event_id", s.EventID),
			zap.Time("period_start", s.PeriodStart), zap.Int("attempt", s.Attempts+1))
		switch {
		case err == nil:
			d.m.delivered.WithLabelValues(a.Name, a.Kind).Inc()
			d.m.lag.WithLabelValues(a.Name, a.Kind).Observe(now.Sub(s.MovedAt).Seconds())
			if s.Attempts > 0 {
				log.Info("action delivered after retries")
			}
		case ctx.Err() != nil:
			// Shutting down: not the event's failure. The transaction
			// rolls back; the event stays as it was.
			out[i] = control.Outcome{Err: err, RetryAt: now}
		case s.Attempts+1 >= a.retry.attempts:
			d.m.dead.WithLabelValues(a.Name, a.Kind).Inc()
			log.Error("action failed too often: event dead-lettered", zap.Error(err))
			out[i] = control.Outcome{Err: err, Dead: true}
		default:
			d.m.retried.WithLabelValues(a.Name, a.Kind).Inc()
			wait := a.retry.after(s.Attempts + 1)
			if s.Attempts == 0 {
				log.Warn("action failed; retrying with backoff", zap.Error(err), zap.Duration("retry_in", wait))
			} else {
				log.Debug("action failed again", zap.Error(err), zap.Duration("retry_in", wait))
			}
			out[i] = control.Outcome{Err: err, RetryAt: now.Add(wait)}
		}
	}
	return out
}
