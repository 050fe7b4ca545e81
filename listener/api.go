package listener

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/finalizer-dev/finalizer/progress"
)

// TrackRequest asks the service to track one run into one table
// (`finalizer track`).
type TrackRequest struct {
	QueryID string               `json:"query_id"`
	RunID   string               `json:"run_id"`
	Table   string               `json:"table"`
	Spec    progress.SpecOptions `json:"spec"`
}

// TrackReply answers a TrackRequest. OK is false and Error says why when
// the run is not tracked.
type TrackReply struct {
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
	// Tracked is false when the run was already tracked into the table.
	Tracked bool `json:"tracked"`
}

// JoinRequest asks the service to wait until a run's tracker has applied
// its last progress after the run's termination (`finalizer join`).
// Timeout bounds the wait; 0 asks for the current state without waiting.
// In JSON the timeout is a Go duration string ("30s"); a number is read as
// nanoseconds.
type JoinRequest struct {
	RunID   string
	Timeout time.Duration
}

type joinRequestJSON struct {
	RunID   string          `json:"run_id"`
	Timeout json.RawMessage `json:"timeout,omitempty"`
}

// MarshalJSON writes the timeout as a duration string.
func (r JoinRequest) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		RunID   string `json:"run_id"`
		Timeout string `json:"timeout"`
	}{r.RunID, r.Timeout.String()})
}

// UnmarshalJSON reads the timeout as a duration string or nanoseconds.
func (r *JoinRequest) UnmarshalJSON(data []byte) error {
	var j joinRequestJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return err
	}
	r.RunID, r.Timeout = j.RunID, 0
	if len(j.Timeout) == 0 || string(j.Timeout) == "null" {
		return nil
	}
	var s string
	if err := json.Unmarshal(j.Timeout, &s); err == nil {
		d, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("timeout: %w", err)
		}
		r.Timeout = d
		return nil
	}
	n, err := strconv.ParseInt(string(j.Timeout), 10, 64)
	if err != nil {
		return fmt.Errorf("timeout: not a duration: %s", j.Timeout)
	}
	r.Timeout = time.Duration(n)
	return nil
}

// JoinReply answers a JoinRequest.
type JoinReply struct {
	// Done is true when every tracker of the run has finished because the
	// run terminated and its last progress was applied (or, Note says,
	// done with unapplied: posted before its table's rewind).
	Done bool `json:"done"`
	// Stopped says why a tracker of the run finished without that
	// (superseded by a run that started later, expired, the service
	// shutting down, the last advance failed); "" otherwise.
	Stopped string `json:"stopped,omitempty"`
	// Error says why the join could not be answered (for example an
	// unknown run); "" otherwise.
	Error string `json:"error,omitempty"`
	// LastError is the tracker's last failed advance, "" if none.
	LastError string `json:"last_error,omitempty"`
	// Note qualifies Done (finalizer.JoinResult.Note): a table's last
	// progress posted before its rewind, done with unapplied; "" if none.
	Note string `json:"note,omitempty"`
}

// trackSubject and joinSubject are the API subjects.
func (l *Listener) trackSubject() string { return l.opts.APIPrefix + ".track" }
func (l *Listener) joinSubject() string  { return l.opts.APIPrefix + ".join" }

// ServeAPI answers track and join requests on <APIPrefix>.track and
// <APIPrefix>.join with the given handlers. Every request runs in its own
// goroutine, owned by the Listener: Close cancels the handlers' context and
// waits for them. At most DefaultMaxInflightAPI requests run at once; more
// get an error reply. Every service instance answers (no queue group), so
// each replica tracks the run; the requester takes the first reply.
func (l *Listener) ServeAPI(track func(context.Context, TrackRequest) TrackReply, join func(context.Context, JoinRequest) JoinReply) (*APISubscription, error) {
	if track == nil || join == nil {
		return nil, errors.New("serve api: nil handler")
	}
	if l.isClosed() {
		return nil, ErrClosed
	}
	s := &APISubscription{subscription{l: l}}
	trackSub, err := l.subscribe(l.trackSubject(), func(m *nats.Msg) {
		l.handle(m, func(ctx context.Context) any {
			var req TrackRequest
			if err := json.Unmarshal(m.Data, &req); err != nil {
				return TrackReply{Error: "bad track request: " + err.Error()}
			}
			return track(ctx, req)
		}, func(msg string) any { return TrackReply{Error: msg} })
	})
	if err != nil {
		return nil, err
	}
	s.subs = append(s.subs, trackSub)
	joinSub, err := l.subscribe(l.joinSubject(), func(m *nats.Msg) {
		l.handle(m, func(ctx context.Context) any {
			var req JoinRequest
			if err := json.Unmarshal(m.Data, &req); err != nil {
				return JoinReply{Error: "bad join request: " + err.Error()}
			}
			ctx, cancel := context.WithTimeout(ctx, max(req.Timeout, 0)+DefaultJoinMargin)
			defer cancel()
			return join(ctx, req)
		}, func(msg string) any { return JoinReply{Error: msg} })
	})
	if err != nil {
		_ = s.Unsubscribe()
		return nil, err
	}
	s.subs = append(s.subs, joinSub)
	if err := register(l, &l.api, s); err != nil {
		_ = s.Unsubscribe()
		return nil, err
	}
	ctx, cancel := context.WithTimeout(l.ctx, l.opts.RequestTimeout)
	defer cancel()
	if err := l.nc.FlushWithContext(ctx); err != nil && !l.nc.IsReconnecting() {
		_ = s.Unsubscribe()
		return nil, fmt.Errorf("serve api: %w", err)
	}
	l.log.Info("serving track and join requests",
		zap.String("track_subject", l.trackSubject()), zap.String("join_subject", l.joinSubject()))
	return s, nil
}

// handle runs one API request in a goroutine owned by the Listener and
// sends its reply.
func (l *Listener) handle(m *nats.Msg, run func(context.Context) any, refuse func(string) any) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		l.respond(m, refuse("finalizer service is shutting down"))
		return
	}
	select {
	case l.inflight <- struct{}{}:
	default:
		l.mu.Unlock()
		l.respond(m, refuse("finalizer service is busy: too many requests in flight"))
		return
	}
	l.wg.Add(1)
	l.mu.Unlock()
	go func() {
		defer l.wg.Done()
		defer func() { <-l.inflight }()
		l.respond(m, run(l.ctx))
	}()
}

// respond sends reply to a request that asked for one.
func (l *Listener) respond(m *nats.Msg, reply any) {
	if m.Reply == "" {
		return
	}
	data, err := json.Marshal(reply)
	if err != nil {
		l.log.Error("encode api reply", zap.String("subject", m.Subject), zap.Error(err))
		return
	}
	if err := m.Respond(data); err != nil {
		l.log.Warn("send api reply", zap.String("subject", m.Subject), zap.Error(err))
	}
}

// RequestTrack asks the running service to track a run and returns its
// reply (check OK and Error). Without a deadline in ctx,
// Options.RequestTimeout applies. It returns ErrNoService when no service
// listens.
func (l *Listener) RequestTrack(ctx context.Context, r TrackRequest) (TrackReply, error) {
	var reply TrackReply
	ctx, cancel := l.withTimeout(ctx, l.opts.RequestTimeout)
	defer cancel()
	err := l.request(ctx, l.trackSubject(), r, &reply)
	return reply, err
}

// RequestJoin asks the running service to wait until the run's tracker is
// done and returns its reply. The request waits r.Timeout plus
// DefaultJoinMargin (or less, if ctx ends first). It returns ErrNoService
// when no service listens.
func (l *Listener) RequestJoin(ctx context.Context, r JoinRequest) (JoinReply, error) {
	var reply JoinReply
	ctx, cancel := context.WithTimeout(ctx, max(r.Timeout, 0)+DefaultJoinMargin)
	defer cancel()
	err := l.request(ctx, l.joinSubject(), r, &reply)
	return reply, err
}

// request sends req as JSON to subject and decodes the reply into reply.
func (l *Listener) request(ctx context.Context, subject string, req, reply any) error {
	if l.isClosed() {
		return ErrClosed
	}
	data, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("encode request: %w", err)
	}
	m, err := l.nc.RequestWithContext(ctx, subject, data)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return fmt.Errorf("%w on %s", ErrNoService, subject)
	case err != nil:
		return fmt.Errorf("request %s: %w", subject, err)
	}
	if err := json.Unmarshal(m.Data, reply); err != nil {
		return fmt.Errorf("decode reply from %s: %w", subject, err)
	}
	return nil
}

// RetireRequest asks the service to retire a query from a table's feeders
// (ADR 0015; `finalizer feeders retire` does it in PostgreSQL directly).
// Query is the query's name or id; Reason is kept with the feeder.
//
// The same request on UnretireSubject takes a retired feeder back
// (`finalizer feeders unretire`): By names the operator, kept in the
// audit table with Reason.
type RetireRequest struct {
	Table  string `json:"table"`
	Query  string `json:"query"`
	Reason string `json:"reason,omitempty"`
	By     string `json:"by,omitempty"`
	// Unretire is set by ServeRetire for a request on UnretireSubject.
	Unretire bool `json:"-"`
}

// RetireReply answers a RetireRequest: the feeders retired, the table's
// verdict afterwards ("" when it has none) and whether the retirement
// moved it. Error says why nothing was retired.
type RetireReply struct {
	OK             bool     `json:"ok"`
	Error          string   `json:"error,omitempty"`
	Retired        []string `json:"retired,omitempty"`
	Unretired      []string `json:"unretired,omitempty"`
	FinalizedUntil string   `json:"finalized_until,omitempty"`
	Moved          bool     `json:"moved,omitempty"`
}

// RetireSubject is the subject of RetireRequests under an API prefix.
func RetireSubject(apiPrefix string) string { return apiPrefix + ".feeders.retire" }

// UnretireSubject is the subject of the requests that take a retired
// feeder back, under an API prefix.
func UnretireSubject(apiPrefix string) string { return apiPrefix + ".feeders.unretire" }

// ServeRetire answers RetireRequests on RetireSubject and UnretireSubject
// (with Unretire set) with retire, each in a goroutine the Listener owns,
// until the returned APISubscription is unsubscribed.
func (l *Listener) ServeRetire(retire func(context.Context, RetireRequest) RetireReply) (*APISubscription, error) {
	if retire == nil {
		return nil, errors.New("serve retire: nil handler")
	}
	if l.isClosed() {
		return nil, ErrClosed
	}
	s := &APISubscription{subscription{l: l}}
	for _, unretire := range []bool{false, true} {
		subject, what := RetireSubject(l.opts.APIPrefix), "retire"
		if unretire {
			subject, what = UnretireSubject(l.opts.APIPrefix), "unretire"
		}
		sub, err := l.subscribe(subject, func(m *nats.Msg) {
			l.handle(m, func(ctx context.Context) any {
				var req RetireRequest
				if err := json.Unmarshal(m.Data, &req); err != nil {
					return RetireReply{Error: "bad " + what + " request: " + err.Error()}
				}
				req.Unretire = unretire
				return retire(ctx, req)
			}, func(msg string) any { return RetireReply{Error: msg} })
		})
		if err != nil {
			_ = s.Unsubscribe()
			return nil, err
		}
		s.subs = append(s.subs, sub)
	}
	if err := register(l, &l.api, s); err != nil {
		_ = s.Unsubscribe()
		return nil, err
	}
	return s, nil
}
