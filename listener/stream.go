package listener

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/finalizer-dev/finalizer/internal/redact"
	"github.com/finalizer-dev/finalizer/progress"
)

// eventKinds are the kinds the stream retains, in subject order.
var eventKinds = []progress.Kind{progress.KindStarted, progress.KindProgress, progress.KindIdle, progress.KindTerminated}

// streamSubjects returns the stream's subjects:
// <prefix>.{started,progress,idle,terminated}.>.
func (l *Listener) streamSubjects() []string {
	subjects := make([]string, len(eventKinds))
	for i, k := range eventKinds {
		subjects[i] = l.opts.Prefix + "." + k.String() + ".>"
	}
	return subjects
}

// noJetStream reports whether err means the server has no JetStream.
func noJetStream(err error) bool {
	return errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, jetstream.ErrJetStreamNotEnabled) ||
		errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount)
}

// EnsureStream creates the event stream with finalizer's settings:
// subjects <prefix>.{started,progress,idle,terminated}.>, one message per
// subject, file storage (written asynchronously when it has one replica),
// direct get allowed, bounded (MaxBytes, and
// messages no larger than MaxPayload or the server's max_payload), and
// the operator's choices from Options: MaxAge, Replicas, PlacementCluster
// and PlacementTags.
//
// Of an existing stream it changes only what finalizer cannot work
// without: a missing event subject is added, direct get is allowed (so
// that any replica of a clustered stream answers the catch-up, not only
// its leader), and an unbounded size or message size is bounded. Every other setting that differs from Options (replicas,
// placement, max age, messages per subject, storage) is the operator's
// choice: it is kept, and one warning names each difference, as
// "replicas: stream 3, config 1"; it is logged again only when the
// differences change. It is idempotent: nothing is written when the stream
// already has what finalizer needs. It returns ErrNoJetStream when the
// server has no JetStream; the service then runs without recovery.
func (l *Listener) EnsureStream(ctx context.Context) error {
	if l.isClosed() {
		return ErrClosed
	}
	ctx, cancel := l.withTimeout(ctx, l.opts.RequestTimeout)
	defer cancel()
	name := l.opts.Stream
	st, err := l.js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		cfg := l.wantStream()
		st, err = l.js.CreateStream(ctx, cfg)
		if err != nil && cfg.PersistMode == jetstream.AsyncPersistMode && unknownPersistMode(err) {
			// A server before 2.12 in strict mode refuses the field it
			// does not know (one not in strict mode ignores it): the
			// stream writes each message, as every stream did before.
			l.log.Info("the NATS server does not know persist_mode (before nats-server 2.12); the event stream is created writing each message",
				zap.String("stream", name), zap.Error(err))
			cfg.PersistMode = jetstream.DefaultPersistMode
			st, err = l.js.CreateStream(ctx, cfg)
		}
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			// Created meanwhile by another replica: conform it below.
			st, err = l.js.Stream(ctx, name)
		} else if err == nil {
			l.logCreated(cfg)
		}
	}
	if err != nil {
		if noJetStream(err) {
			return ErrNoJetStream
		}
		return fmt.Errorf("ensure stream %s: %w", name, err)
	}
	info := st.CachedInfo()
	cfg := info.Config
	if l.conform(&cfg) {
		if st, err = l.js.UpdateStream(ctx, cfg); err != nil {
			return fmt.Errorf("update stream %s: %w", name, err)
		}
		l.log.Info("updated event stream", zap.String("stream", name), zap.Strings("subjects", cfg.Subjects),
			zap.Bool("allow_direct", cfg.AllowDirect), zap.Int64("max_bytes", cfg.MaxBytes), zap.Int32("max_msg_size", cfg.MaxMsgSize))
		info = st.CachedInfo()
	}
	diffs := l.StreamDifferences(info)
	l.mu.Lock()
	logDiffs := strings.Join(diffs, "; ") != l.differs
	l.differs = strings.Join(diffs, "; ")
	l.stream, l.ensured, l.pubJS, l.created = st, true, 1, info.Created
	l.mu.Unlock()
	l.watchAdvisories()
	if logDiffs && len(diffs) > 0 {
		l.log.Warn("the event stream's settings differ from the configuration; the stream's are kept "+
			"(change the stream with the nats CLI, or the configuration, to silence this)",
			zap.String("stream", name), zap.Strings("differences", diffs))
	}
	return nil
}

// logCreated logs the creation of the event stream. A stream this listener
// had ensured and that checkStream did not find gone (it is creating it
// again itself) was lost unseen: the server came back without its store
// (restarted on an empty store directory), or the stream was deleted while
// the connection was down, and the reconnect's EnsureStream found none. What
// it retained is gone as surely as after a deletion, so it is one.
func (l *Listener) logCreated(cfg jetstream.StreamConfig) {
	l.mu.Lock()
	lost := l.ensured && !l.recreating
	l.mu.Unlock()
	if lost {
		l.log.Error("the event stream was gone when the connection came back (a server restarted without its store, or the stream "+
			"deleted meanwhile); created it again (the events it retained are gone: runs tracked from now on, and a restart's "+
			"recovery, miss what was published before)", zap.String("stream", cfg.Name))
		l.incident(StreamDeleted)
		return
	}
	l.log.Info("created event stream", zap.String("stream", cfg.Name), zap.Strings("subjects", cfg.Subjects),
		zap.Duration("max_age", cfg.MaxAge), zap.Int("replicas", cfg.Replicas), zap.Any("placement", cfg.Placement))
}

// unknownPersistMode reports whether a stream's creation was refused for
// its persist_mode field: a server that predates it and decodes its API
// requests strictly ("unknown field").
func unknownPersistMode(err error) bool {
	return strings.Contains(err.Error(), "persist_mode")
}

// wantStream returns the configuration of a stream EnsureStream creates.
func (l *Listener) wantStream() jetstream.StreamConfig {
	cfg := jetstream.StreamConfig{
		Name:              l.opts.Stream,
		Description:       "finalizer: the last started, progress, idle and terminated event of every streaming query run",
		Subjects:          l.streamSubjects(),
		Retention:         jetstream.LimitsPolicy,
		Discard:           jetstream.DiscardOld,
		MaxMsgsPerSubject: 1,
		MaxAge:            l.opts.MaxAge,
		MaxBytes:          l.opts.MaxBytes,
		MaxMsgSize:        l.maxMsgSize(),
		Storage:           jetstream.FileStorage,
		AllowDirect:       true,
		Replicas:          l.opts.Replicas,
	}
	if cfg.Replicas <= 1 {
		// Written to disk in batches rather than a write per message (ADR
		// 0004, addendum): reads see every stored message at once, a clean
		// stop writes what is pending, a killed server process loses the
		// last milliseconds. The server refuses it on replicated streams.
		cfg.PersistMode = jetstream.AsyncPersistMode
	}
	if l.opts.PlacementCluster != "" || len(l.opts.PlacementTags) > 0 {
		cfg.Placement = &jetstream.Placement{Cluster: l.opts.PlacementCluster, Tags: slices.Clone(l.opts.PlacementTags)}
	}
	return cfg
}

// conform adds to cfg what finalizer cannot work without (its subjects,
// direct get) and reports whether anything changed.
func (l *Listener) conform(cfg *jetstream.StreamConfig) bool {
	changed := false
	for _, s := range l.streamSubjects() {
		if !slices.Contains(cfg.Subjects, s) {
			cfg.Subjects = append(cfg.Subjects, s)
			changed = true
		}
	}
	if !cfg.AllowDirect {
		cfg.AllowDirect, changed = true, true
	}
	// An unbounded stream (one made before finalizer bounded it) grows
	// with every flood: bound it. A bound the operator set is kept.
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes, changed = l.opts.MaxBytes, true
	}
	if cfg.MaxMsgSize <= 0 {
		cfg.MaxMsgSize, changed = l.maxMsgSize(), true
	}
	return changed
}

// maxMsgSize is the largest message the stream stores: MaxPayload (larger
// ones are never parsed), or the server's max_payload when smaller.
func (l *Listener) maxMsgSize() int32 {
	n := int64(l.opts.MaxPayload)
	if l.nc != nil {
		if mp := l.nc.MaxPayload(); mp > 0 && mp < n {
			n = mp
		}
	}
	return int32(min(n, int64(1<<31-1)))
}

// StreamDifferences lists, one string each ("max age: stream 1h0m0s,
// config 168h0m0s"), the operator's settings of the stream described by
// info that differ from what EnsureStream would create. The cluster is
// compared with the one the stream is placed on when the server says.
func (l *Listener) StreamDifferences(info *jetstream.StreamInfo) []string {
	want, got := l.wantStream(), info.Config
	var diffs []string
	differ := func(what string, stream, config any) {
		diffs = append(diffs, fmt.Sprintf("%s: stream %v, config %v", what, stream, config))
	}
	if got.Replicas != want.Replicas && !(got.Replicas == 0 && want.Replicas == 1) {
		differ("replicas", got.Replicas, want.Replicas)
	}
	if got.MaxAge != want.MaxAge {
		differ("max age", got.MaxAge, want.MaxAge)
	}
	if got.MaxMsgsPerSubject != want.MaxMsgsPerSubject {
		differ("messages per subject", got.MaxMsgsPerSubject, want.MaxMsgsPerSubject)
	}
	if got.Storage != want.Storage {
		differ("storage", got.Storage, want.Storage)
	}
	if c := l.opts.PlacementCluster; c != "" {
		on := ""
		if got.Placement != nil {
			on = got.Placement.Cluster
		}
		if info.Cluster != nil && info.Cluster.Name != "" {
			on = info.Cluster.Name
		}
		if on != c {
			differ("placement cluster", quoteEmpty(on), c)
		}
	}
	var gotTags []string
	if got.Placement != nil {
		gotTags = got.Placement.Tags
	}
	if !sameSet(gotTags, l.opts.PlacementTags) {
		differ("placement tags", gotTags, l.opts.PlacementTags)
	}
	return diffs
}

// quoteEmpty shows "" as "none".
func quoteEmpty(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// sameSet reports whether a and b hold the same strings, in any order.
func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// eventStream returns the event stream, looking it up until found (and
// again after a reconnect). It returns ErrNoJetStream or ErrNoStream when
// there is none.
func (l *Listener) eventStream(ctx context.Context) (jetstream.Stream, error) {
	l.mu.Lock()
	st, closed := l.stream, l.closed
	l.mu.Unlock()
	switch {
	case closed:
		return nil, ErrClosed
	case st != nil:
		return st, nil
	}
	// Not cached when absent: a server without JetStream answers "no
	// responders" at once, and one whose JetStream comes later is used.
	st, err := l.js.Stream(ctx, l.opts.Stream)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return nil, fmt.Errorf("%w: %s", ErrNoStream, l.opts.Stream)
	case noJetStream(err):
		return nil, ErrNoJetStream
	case err != nil:
		return nil, fmt.Errorf("stream %s: %w", l.opts.Stream, err)
	}
	l.mu.Lock()
	if l.stream == nil {
		l.stream = st
	}
	st = l.stream
	l.mu.Unlock()
	return st, nil
}

// Retained lists the runs the stream holds events of, sorted by query id
// and run id, with the name from each run's retained progress (else its
// started event), Terminated set when its termination is retained and
// Stored the time the stream stored the newest of its events. It reads
// the stream once (scanStream), however many runs it holds, with no
// overall deadline but ctx's: each read is bounded on its own. It returns
// ErrNoJetStream or ErrNoStream when there is no stream to read.
func (l *Listener) Retained(ctx context.Context) ([]Run, error) {
	type key struct{ q, r string }
	type seen struct {
		kinds  [progress.KindTerminated + 1]bool
		name   string
		stored time.Time
		seq    uint64
	}
	var all map[key]*seen
	// Under a hold of catch-ups, what is read is kept for the release
	// (HoldCatchUps): the runs' events, checked once here.
	var snap *retainedSnapshot
	if hold, gen := l.snapshotting(); hold {
		if info, ok := l.streamState(ctx); ok {
			// A restart's listing: the maps are made at about the size
			// they reach (a run has from one to four subjects, most two
			// or three), not grown from nothing through 100,000 runs.
			hint := int(min(info.State.NumSubjects/2, maxListingHint))
			all = make(map[key]*seen, hint)
			snap = &retainedSnapshot{runs: make(map[string][]retainedMsg, hint), gen: gen, created: info.Created}
		}
	}
	if all == nil {
		all = make(map[key]*seen)
	}
	last, err := l.scanStream(ctx, eventKinds, 0, func(subject string, data []byte, stored time.Time, seq uint64) {
		es, ok := l.splitSubject(subject)
		if !ok {
			return
		}
		k := key{es.queryID, es.runID}
		r := all[k]
		if r == nil {
			r = &seen{}
			all[k] = r
		}
		r.kinds[es.kind] = true
		if stored.After(r.stored) {
			r.stored = stored
		}
		r.seq = max(r.seq, seq)
		keep := snap != nil && es.kind != progress.KindIdle
		// The progress's name counts over the started event's.
		naming := es.kind == progress.KindProgress || (es.kind == progress.KindStarted && r.name == "")
		if keep || naming {
			ev, _, err := l.check(es, data)
			if err == nil && ev.Name != "" && naming {
				r.name = ev.Name
			}
			if keep {
				m := retainedMsg{subject: subject, kind: es.kind, ev: ev, stored: unixNanos(stored), seq: seq}
				if err != nil {
					m.ev, m.data = nil, data
				}
				msgs := snap.runs[es.runID]
				if msgs == nil {
					// Room for the run's started event and progress
					// (most runs' two): one array per run instead of
					// one for the first and another for the second.
					msgs = make([]retainedMsg, 0, 2)
				}
				snap.runs[es.runID] = append(msgs, m)
			}
		}
	})
	if err != nil {
		if errors.Is(err, ErrNoJetStream) || errors.Is(err, ErrNoStream) {
			return nil, err
		}
		return nil, fmt.Errorf("read retained runs: %w", err)
	}
	if snap != nil {
		snap.last = last
		l.keepSnapshot(snap)
	}
	runs := make([]Run, 0, len(all))
	for k, r := range all {
		run := Run{QueryID: k.q, RunID: k.r, Name: r.name, Terminated: r.kinds[progress.KindTerminated], Stored: r.stored.UTC(), Seq: r.seq}
		for _, kind := range []progress.Kind{progress.KindTerminated, progress.KindProgress, progress.KindIdle, progress.KindStarted} {
			if r.kinds[kind] {
				run.Kind = kind
				break
			}
		}
		runs = append(runs, run)
	}
	sort.Slice(runs, func(i, j int) bool {
		if runs[i].QueryID != runs[j].QueryID {
			return runs[i].QueryID < runs[j].QueryID
		}
		return runs[i].RunID < runs[j].RunID
	})
	return runs, nil
}

// maxListingHint bounds the size a restart's listing makes its maps at
// (Retained), whatever the stream reports.
const maxListingHint = 1 << 20

// retainedName returns the query name from the run's retained progress or
// started event (whichever are looked at), or "".
func (l *Listener) retainedName(ctx context.Context, queryID, runID string, fromProgress, fromStarted bool) string {
	st, err := l.eventStream(ctx)
	if err != nil {
		return ""
	}
	for _, kind := range []progress.Kind{progress.KindProgress, progress.KindStarted} {
		if (kind == progress.KindProgress && !fromProgress) || (kind == progress.KindStarted && !fromStarted) {
			continue
		}
		subj := l.subject(kind.String(), queryID, runID)
		msg, err := st.GetLastMsgForSubject(ctx, subj)
		if err != nil {
			if !errors.Is(err, jetstream.ErrMsgNotFound) {
				l.log.Debug("read retained event", zap.String("subject", subj), zap.Error(err))
			}
			continue
		}
		es, ok := l.splitSubject(msg.Subject)
		if !ok {
			continue
		}
		if ev, _, err := l.check(es, msg.Data); err == nil && ev.Name != "" {
			return ev.Name
		}
	}
	return ""
}

// Publish sends one event's payload to <prefix>.<kind>.<queryId>.<runId>,
// taking the subject from ev (which is not checked against payload). When a
// stream captures the subject it publishes through JetStream and waits for
// the stream's acknowledgement; otherwise it publishes plainly and flushes.
// Without a deadline in ctx, Options.RequestTimeout applies.
func (l *Listener) Publish(ctx context.Context, ev *progress.Event, payload []byte) error {
	if ev == nil {
		return errors.New("publish: nil event")
	}
	if ev.Kind == progress.KindUnknown || ev.Kind > progress.KindTerminated {
		return fmt.Errorf("publish: event kind %d has no subject", ev.Kind)
	}
	if err := checkToken("query id", ev.QueryID); err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	if err := checkToken("run id", ev.RunID); err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	if l.isClosed() {
		return ErrClosed
	}
	ctx, cancel := l.withTimeout(ctx, l.opts.RequestTimeout)
	defer cancel()
	subj := l.subject(ev.Kind.String(), ev.QueryID, ev.RunID)
	if l.publishViaJetStream(ctx, subj) {
		_, err := l.js.Publish(ctx, subj, payload)
		if err == nil {
			return nil
		}
		if !errors.Is(err, jetstream.ErrNoStreamResponse) {
			return fmt.Errorf("publish %s: %w", subj, err)
		}
		// Nobody at all received it: the stream is gone. Publish plainly.
		l.mu.Lock()
		l.pubJS = 0
		l.mu.Unlock()
	}
	if err := l.nc.Publish(subj, payload); err != nil {
		return fmt.Errorf("publish %s: %w", subj, err)
	}
	if err := l.nc.FlushWithContext(ctx); err != nil {
		return fmt.Errorf("publish %s: flush: %w", subj, err)
	}
	return nil
}

// DefaultStreamLookupTimeout bounds Publish's question, asked once per
// connection, whether a stream captures the subject.
const DefaultStreamLookupTimeout = time.Second

// publishViaJetStream reports whether a stream captures subj, asking the
// server once per connection. A failed question (no JetStream, no
// permission for its API) means plain publishing.
func (l *Listener) publishViaJetStream(ctx context.Context, subj string) bool {
	l.mu.Lock()
	state := l.pubJS
	l.mu.Unlock()
	if state != 0 {
		return state > 0
	}
	state = -1
	// Bounded on its own: a login that may not use the JetStream API (a
	// publisher-only role) gets no answer at all, only an asynchronous
	// permissions violation, and the publish still needs time after it.
	lctx, cancel := context.WithTimeout(ctx, DefaultStreamLookupTimeout)
	defer cancel()
	name, err := l.js.StreamNameBySubject(lctx, subj)
	switch {
	case err == nil && name != "":
		state = 1
	case err != nil && !errors.Is(err, jetstream.ErrStreamNotFound):
		l.log.Debug("no stream lookup; publishing without acknowledgement", zap.Error(err))
	}
	l.mu.Lock()
	l.pubJS = state
	l.mu.Unlock()
	return state > 0
}

// StreamName returns the name of the event stream.
func (l *Listener) StreamName() string { return l.opts.Stream }

// ServerURL returns the URL of the NATS server the listener is connected
// to, its secrets masked (redact.URLs); "" when it is not connected.
func (l *Listener) ServerURL() string {
	if l.nc == nil {
		return ""
	}
	return redact.URLs(l.nc.ConnectedUrl())
}

// StreamReady reports whether the event stream exists: ErrNoStream when it
// does not (someone deleted it; the listener recreates it, see
// Options.StreamCheckEvery), ErrNoJetStream without JetStream. It asks the
// server once, bounded by Options.RequestTimeout, and is meant for a
// readiness probe.
func (l *Listener) StreamReady(ctx context.Context) error {
	if l.isClosed() {
		return ErrClosed
	}
	ctx, cancel := context.WithTimeout(ctx, l.opts.RequestTimeout)
	defer cancel()
	_, err := l.js.Stream(ctx, l.opts.Stream)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return fmt.Errorf("%w: %s", ErrNoStream, l.opts.Stream)
	case noJetStream(err):
		return ErrNoJetStream
	case err != nil:
		return fmt.Errorf("stream %s: %w", l.opts.Stream, err)
	}
	return nil
}

// The incidents of the event stream that Options.OnStreamIncident reports.
const (
	// StreamDeleted: the stream was found deleted (or deleted and created
	// again by someone else); the listener recreated it (or conformed
	// the new one). What it retained is gone.
	StreamDeleted = "deleted"
	// StreamPurged: someone purged the stream (the server's audit
	// advisory says so). What it retained is gone; the stream still
	// stores new events.
	StreamPurged = "purged"
)

// The server's JetStream advisories the listener reads to notice a purge or
// a deletion of its stream at once: every JetStream API call's audit, and
// the deletion of a stream. A login that may not subscribe to them (an
// external server's narrow permissions) leaves the periodic check.
const (
	advisoryAPI           = "$JS.EVENT.ADVISORY.API"
	advisoryStreamDeleted = "$JS.EVENT.ADVISORY.STREAM.DELETED."
)

// watchAdvisories subscribes, once, to the advisories of a purge or a
// deletion of the stream. Its callback parses the small advisory, logs and
// counts a purge, and hands a deletion to maintain; it does no I/O.
func (l *Listener) watchAdvisories() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.advisories != nil || l.closed || l.opts.StreamCheckEvery < 0 {
		return
	}
	var subs []*nats.Subscription
	for _, subj := range []string{advisoryAPI, advisoryStreamDeleted + l.opts.Stream} {
		sub, err := l.nc.Subscribe(subj, l.onAdvisory)
		if err != nil {
			l.log.Debug("no stream advisories; the periodic check notices a deleted stream", zap.String("subject", subj), zap.Error(err))
			continue
		}
		subs = append(subs, sub)
	}
	l.advisories = subs
}

// onAdvisory handles one advisory (see watchAdvisories).
func (l *Listener) onAdvisory(m *nats.Msg) {
	if strings.HasPrefix(m.Subject, advisoryStreamDeleted) {
		l.kickStreamCheck()
		return
	}
	// Every JetStream call is audited: read only those about the stream.
	if !bytes.Contains(m.Data, []byte("$JS.API.STREAM.PURGE."+l.opts.Stream)) &&
		!bytes.Contains(m.Data, []byte("$JS.API.STREAM.DELETE."+l.opts.Stream)) {
		return
	}
	var audit struct {
		Subject  string `json:"subject"`
		Response string `json:"response"`
		Client   *struct {
			User string `json:"user"`
			Host string `json:"host"`
			Name string `json:"name"`
		} `json:"client"`
	}
	if json.Unmarshal(m.Data, &audit) != nil {
		return
	}
	switch audit.Subject {
	case "$JS.API.STREAM.DELETE." + l.opts.Stream:
		l.kickStreamCheck()
	case "$JS.API.STREAM.PURGE." + l.opts.Stream:
		var resp struct {
			Success bool   `json:"success"`
			Purged  uint64 `json:"purged"`
		}
		if json.Unmarshal([]byte(audit.Response), &resp) != nil || !resp.Success {
			return
		}
		var who []zap.Field
		if c := audit.Client; c != nil {
			who = []zap.Field{zap.String("by_user", c.User), zap.String("by_host", c.Host), zap.String("by_client", c.Name)}
		}
		l.log.Error("the event stream was purged: the events it retained are gone (runs tracked from now on, "+
			"and a restart's recovery, miss what was published before); new events are stored again",
			append([]zap.Field{zap.String("stream", l.opts.Stream), zap.Uint64("purged_messages", resp.Purged)}, who...)...)
		l.incident(StreamPurged)
	}
}

// kickStreamCheck makes maintain check the stream now.
func (l *Listener) kickStreamCheck() {
	select {
	case l.streamKick <- struct{}{}:
	default:
	}
}

// incident reports a stream incident to Options.OnStreamIncident.
func (l *Listener) incident(kind string) {
	l.streamChanged()
	if l.opts.OnStreamIncident != nil {
		l.opts.OnStreamIncident(kind)
	}
}

// recreateDelay is how long checkStream lets a deletion settle before it
// creates the stream again (see there).
const recreateDelay = time.Second

// checkStream looks the ensured stream up and recreates it when it is gone,
// or conforms it when it is another stream of the same name (deleted and
// created again, by someone else, since the last check). It runs on
// maintain's goroutine.
func (l *Listener) checkStream() {
	l.mu.Lock()
	ensured, created := l.ensured, l.created
	l.mu.Unlock()
	if !ensured || l.nc.IsReconnecting() || l.ctx.Err() != nil {
		return
	}
	ctx, cancel := context.WithTimeout(l.ctx, l.opts.RequestTimeout)
	defer cancel()
	st, err := l.js.Stream(ctx, l.opts.Stream)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		l.log.Error("the event stream was deleted; recreating it (the events it retained are gone: runs tracked "+
			"from now on, and a restart's recovery, miss what was published before)", zap.String("stream", l.opts.Stream))
	case err != nil:
		return // not answering: Ready says so; the next check tries again
	case st.CachedInfo().Created.Equal(created):
		return
	default:
		l.log.Error("the event stream was deleted and created again by someone else; conforming it "+
			"(the events it retained are gone)", zap.String("stream", l.opts.Stream),
			zap.Time("created", st.CachedInfo().Created))
	}
	l.incident(StreamDeleted)
	l.mu.Lock()
	l.stream, l.pubJS = nil, 0
	l.mu.Unlock()
	// Not at once: a stream created again within moments of its deletion
	// was, in about one try in four here (nats-server v2.15.2, embedded),
	// a stream that stored nothing at all, for good (TestStreamDeleted-
	// OrPurged: 0 messages after any number of publishes). Waiting for the
	// deletion to settle made 20 tries in 20 store again.
	select {
	case <-time.After(recreateDelay):
	case <-l.ctx.Done():
		return
	}
	l.mu.Lock()
	l.recreating = true // counted above: EnsureStream's creation is not another loss
	l.mu.Unlock()
	err = l.EnsureStream(ctx)
	l.mu.Lock()
	l.recreating = false
	l.mu.Unlock()
	if err != nil {
		l.log.Error("recreate the event stream; retrying at the next check", zap.String("stream", l.opts.Stream), zap.Error(err))
		return
	}
	l.log.Info("event stream recreated", zap.String("stream", l.opts.Stream))
}
