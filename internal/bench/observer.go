package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/finalizer-dev/finalizer/control"
)

// observer listens on the verdict channel, as a downstream job would, and
// records when each table's verdict reached what: the committed row as the
// outside world sees it.
type observer struct {
	conn   *pgx.Conn
	cancel context.CancelFunc
	done   chan struct{}
	err    error // why the loop stopped, once done is closed

	mu      sync.Mutex
	reached map[string]time.Time // table -> newest finalized_until heard
	heardAt map[string]time.Time // table -> when that was heard
	count   int64                // notifications heard
	// Latency probes: per table, crossings published and not yet heard,
	// oldest first.
	pending map[string][]probe
	lat     []heardProbe
	// A wait for every table of targets to reach its time.
	targets  map[string]time.Time
	left     int
	last     time.Time // when the last target was reached
	targetOK chan struct{}
}

// probe is one period-crossing progress whose commit is awaited.
type probe struct {
	until     time.Time
	published time.Time
}

// heardProbe is a probe whose verdict was heard: when its progress was
// published, and how long after that its verdict was heard.
type heardProbe struct {
	table     string
	published time.Time
	latency   time.Duration
}

// startObserver opens its own connection and LISTENs on the channel.
func startObserver(ctx context.Context, url string) (*observer, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("observer: %w", err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+control.NotifyChannel); err != nil {
		_ = conn.Close(ctx)
		return nil, fmt.Errorf("observer: listen: %w", err)
	}
	lctx, cancel := context.WithCancel(context.Background())
	o := &observer{
		conn:    conn,
		cancel:  cancel,
		done:    make(chan struct{}),
		reached: make(map[string]time.Time),
		heardAt: make(map[string]time.Time),
		pending: make(map[string][]probe),
	}
	go o.loop(lctx)
	return o, nil
}

func (o *observer) loop(ctx context.Context) {
	defer close(o.done)
	for {
		n, err := o.conn.WaitForNotification(ctx)
		if err != nil {
			if !errors.Is(err, context.Canceled) {
				o.err = err
			}
			return
		}
		now := time.Now()
		var p struct {
			Table          string    `json:"table"`
			FinalizedUntil time.Time `json:"finalized_until"`
		}
		if json.Unmarshal([]byte(n.Payload), &p) != nil {
			continue
		}
		o.heard(p.Table, p.FinalizedUntil, now)
	}
}

// heard records one notification.
func (o *observer) heard(table string, until, at time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.count++
	if prev, ok := o.reached[table]; !ok || until.After(prev) {
		o.reached[table], o.heardAt[table] = until, at
	}
	if ps := o.pending[table]; len(ps) > 0 {
		i := 0
		for ; i < len(ps) && !ps[i].until.After(until); i++ {
			o.lat = append(o.lat, heardProbe{table: table, published: ps[i].published, latency: at.Sub(ps[i].published)})
		}
		if i == len(ps) {
			delete(o.pending, table)
		} else {
			o.pending[table] = ps[i:]
		}
	}
	if o.targets != nil {
		if t, ok := o.targets[table]; ok && !until.Before(t) {
			delete(o.targets, table)
			o.left--
			if o.left == 0 {
				o.last = at
				close(o.targetOK)
				o.targets = nil
			}
		}
	}
}

// expect registers a latency probe: table's verdict should reach until
// because of a progress published at published.
func (o *observer) expect(table string, until, published time.Time) {
	o.mu.Lock()
	o.pending[table] = append(o.pending[table], probe{until: until, published: published})
	o.mu.Unlock()
}

// takeLatencies returns the probes heard since the last call, in the
// order they were heard, and how many are still unanswered (they are
// dropped).
func (o *observer) takeLatencies() ([]heardProbe, int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	lat := o.lat
	o.lat = nil
	missing := 0
	for _, ps := range o.pending {
		missing += len(ps)
	}
	o.pending = make(map[string][]probe)
	return lat, missing
}

// waitAll blocks until every table of targets has been heard at or beyond
// its time (counting what was heard before the call) and returns when the
// last one was heard. On timeout it returns how many are still missing.
func (o *observer) waitAll(ctx context.Context, targets map[string]time.Time) (time.Time, int, error) {
	o.mu.Lock()
	o.targets = make(map[string]time.Time, len(targets))
	var last time.Time
	for table, t := range targets {
		if r, ok := o.reached[table]; ok && !r.Before(t) {
			// Reached before the wait (a start that commits the
			// recovered verdicts before it returns): when it was heard.
			if at := o.heardAt[table]; at.After(last) {
				last = at
			}
			continue
		}
		o.targets[table] = t
	}
	o.left = len(o.targets)
	o.targetOK = make(chan struct{})
	if o.left == 0 {
		o.targets = nil
		o.mu.Unlock()
		return last, 0, nil
	}
	ok := o.targetOK
	o.mu.Unlock()
	select {
	case <-ok:
		o.mu.Lock()
		defer o.mu.Unlock()
		return o.last, 0, nil
	case <-o.done:
		o.mu.Lock()
		defer o.mu.Unlock()
		return time.Time{}, o.left, fmt.Errorf("observer stopped: %v", o.err)
	case <-ctx.Done():
		o.mu.Lock()
		defer o.mu.Unlock()
		left := o.left
		o.targets = nil
		return time.Time{}, left, ctx.Err()
	}
}

// notifications returns how many notifications were heard.
func (o *observer) notifications() int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.count
}

// close stops the loop and closes the connection. It blocks.
func (o *observer) close() {
	o.cancel()
	<-o.done
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_ = o.conn.Close(ctx)
	cancel()
}

// forget drops what was heard, for a new consumer whose verdicts start
// from nothing (the naive baseline's own table).
func (o *observer) forget() {
	o.mu.Lock()
	o.reached = make(map[string]time.Time)
	o.pending = make(map[string][]probe)
	o.lat = nil
	o.mu.Unlock()
}
