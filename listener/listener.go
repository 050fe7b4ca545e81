package listener

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/finalizer-dev/finalizer/internal/lograte"
	"github.com/finalizer-dev/finalizer/internal/redact"
	"github.com/finalizer-dev/finalizer/progress"
)

// Defaults for Options.
const (
	// DefaultPrefix is the first token(s) of every event subject.
	DefaultPrefix = "spark"
	// DefaultStream is the name of the JetStream stream that retains each
	// run's last events.
	DefaultStream = "SPARK_EVENTS"
	// DefaultMaxAge is how long the stream keeps a message.
	DefaultMaxAge = 7 * 24 * time.Hour
	// DefaultMaxBytes bounds the stream's size on disk: beyond it the
	// oldest runs' events are dropped first. About 500,000 runs' last
	// progress of 2 KiB.
	DefaultMaxBytes = 1 << 30
	// DefaultAPIPrefix is the subject prefix of the track and join
	// requests. It lies outside the event prefix so that publishers can be
	// allowed the events and denied the API.
	DefaultAPIPrefix = "finalizer.api"
	// DefaultName is the client connection name shown by the server.
	DefaultName = "finalizer"
	// DefaultMaxPayload is the largest event payload, in bytes, that is
	// parsed; larger ones are dropped and counted as malformed.
	DefaultMaxPayload = 1 << 20
	// DefaultReconnectWait is the pause between reconnect attempts.
	DefaultReconnectWait = time.Second
	// DefaultRequestTimeout bounds JetStream calls, flushes and API
	// requests whose context has no deadline of its own.
	DefaultRequestTimeout = 5 * time.Second
	// DefaultJoinMargin is added to a join's own timeout to get the timeout
	// of its request, so the service's answer still arrives in time.
	DefaultJoinMargin = 5 * time.Second
	// DefaultWarnEvery is the minimum interval between two warnings about
	// dropped messages of one class (outcome and kind); the count of
	// those held back rides on the next one, or is said by maintain when
	// none comes (reportHeld).
	DefaultWarnEvery = 10 * time.Second
	// DefaultPendingMsgs and DefaultPendingBytes are the pending limits of
	// the API subscriptions: generous, because a callback never waits on I/O.
	DefaultPendingMsgs  = 1 << 20
	DefaultPendingBytes = 256 << 20
	// DefaultRouterPendingMsgs and DefaultRouterPendingBytes are the pending
	// limits of the one event subscription that serves every run and
	// discovery (ADR 0009): a backlog of 262,144 messages (routerChanLen).
	DefaultRouterPendingMsgs  = 4 << 20
	DefaultRouterPendingBytes = 1 << 30
	// DefaultReensureFor is how long the listener keeps retrying to
	// re-ensure the stream after a reconnect.
	DefaultReensureFor = time.Minute
	// DefaultRetryMin and DefaultRetryMax bound the delay between retries
	// of a run's failed catch-up from the stream.
	DefaultRetryMin = 100 * time.Millisecond
	DefaultRetryMax = 5 * time.Second
	// DefaultStreamCheckEvery is how often the listener checks that the
	// stream it ensured still exists (and recreates it when not).
	DefaultStreamCheckEvery = 5 * time.Second
	// DefaultMaxInflightAPI bounds the API requests handled at once; more
	// get an error reply.
	DefaultMaxInflightAPI = 1024
)

// The outcomes Options.OnEvent reports for every event a subscription
// handles.
const (
	// OutcomeAccepted: parsed, ids matching, offered to the run's mailbox.
	OutcomeAccepted = "accepted"
	// OutcomeMalformed: bad subject, payload too large, or not parseable.
	OutcomeMalformed = "malformed"
	// OutcomeMismatch: the ids or the kind in the payload differ from the
	// subject's.
	OutcomeMismatch = "mismatch"
	// OutcomeIgnored: a well-formed event of a class finalizer does not use.
	OutcomeIgnored = "ignored"
	// OutcomeSuperseded: a progress that waited unparsed in its run's slot
	// and was made useless by a newer one (or that was older than the one
	// waiting or taken); it is never parsed (ADR 0011).
	OutcomeSuperseded = "superseded"
)

// Errors of the package. Errors from nats.go are wrapped, not translated,
// except where noted.
var (
	// ErrNoJetStream is returned when the server has no JetStream. The
	// service then runs without recovery: live events only.
	ErrNoJetStream = errors.New("jetstream is not available on the nats server")
	// ErrNoStream is returned by Retained when JetStream is there but the
	// stream is not (EnsureStream was never run against this server).
	ErrNoStream = errors.New("event stream not found")
	// ErrNoService is returned by RequestTrack and RequestJoin when no
	// finalizer service is listening on the API subject.
	ErrNoService = errors.New("no finalizer service is listening")
	// ErrClosed is returned by every method called after Close.
	ErrClosed = errors.New("listener closed")
	// ErrNotConnected is returned by Ready while the connection is down.
	ErrNotConnected = errors.New("not connected to nats")
	// ErrInvalidToken is returned when an id or prefix cannot be used as a
	// subject token (empty, or holding '.', '*', '>' or white space).
	ErrInvalidToken = errors.New("not a valid subject token")
)

// Options configure Dial. The zero value of every field means its default;
// authentication and TLS are off unless set.
type Options struct {
	// URL is the server URL, or several separated by commas; "" means
	// nats://127.0.0.1:4222.
	URL string
	// Prefix is the event subject prefix, one or more tokens; "" means
	// DefaultPrefix.
	Prefix string
	// Stream is the JetStream stream's name; "" means DefaultStream.
	Stream string
	// MaxAge is the stream's retention; 0 means DefaultMaxAge.
	MaxAge time.Duration
	// MaxBytes bounds the stream EnsureStream creates; 0 means
	// DefaultMaxBytes. Its largest message is MaxPayload, or the server's
	// max_payload when smaller.
	MaxBytes int64
	// Replicas is the replica count of the stream EnsureStream creates
	// (R3 on a three-node JetStream cluster); 0 means 1. Of an existing
	// stream it is only compared (see EnsureStream).
	Replicas int
	// PlacementCluster and PlacementTags place the stream EnsureStream
	// creates on a named cluster and/or on servers with all of these tags;
	// empty means wherever the server chooses. Of an existing stream they
	// are only compared.
	PlacementCluster string
	PlacementTags    []string
	// APIPrefix is the prefix of the track and join subjects; "" means
	// DefaultAPIPrefix.
	APIPrefix string
	// Name is the client connection's name; "" means DefaultName.
	Name string
	// Logger receives connection events and rate-limited warnings about
	// dropped messages; nil discards them.
	Logger *zap.Logger
	// OnEvent, when set, is called once per event a run subscription (or
	// Discover, for bad messages of runs not known yet) handles, with one of
	// the Outcome constants. It runs on the subscription's goroutine and
	// must be fast and safe for concurrent use.
	OnEvent func(kind progress.Kind, outcome string)

	// OnStreamIncident, when set, is called with StreamDeleted or
	// StreamPurged when the listener notices that someone deleted or
	// purged the stream it ensured. It must not block.
	OnStreamIncident func(kind string)
	// StreamCheckEvery is how often the listener checks that the stream it
	// ensured still exists, and recreates it when not; 0 means
	// DefaultStreamCheckEvery, negative never (no check, no advisories).
	// The server's advisories (when the login may read them) trigger the
	// check at once.
	StreamCheckEvery time.Duration

	// RouterPendingMsgs and RouterPendingBytes bound the backlog of the
	// one event subscription (ADR 0009); 0 means DefaultRouterPendingMsgs
	// and DefaultRouterPendingBytes. The backlog is a channel of the
	// smaller of RouterPendingMsgs and RouterPendingBytes / 4 KiB messages
	// (routerChanLen). Beyond it the client drops messages (a slow
	// consumer), and the listener catches every run up from the stream
	// once the backlog is down again.
	RouterPendingMsgs, RouterPendingBytes int

	// MaxPayload is the largest payload parsed; 0 means DefaultMaxPayload.
	MaxPayload int
	// ReconnectWait is the pause between reconnect attempts; 0 means
	// DefaultReconnectWait.
	ReconnectWait time.Duration
	// RequestTimeout bounds calls whose context has no deadline; 0 means
	// DefaultRequestTimeout.
	RequestTimeout time.Duration
	// Now is the clock of the warning rate limiter; nil means time.Now.
	Now func() time.Time

	// User and Password authenticate with a user name; Token with a token.
	User, Password, Token string
	// NKeySeedFile authenticates with an NKey seed; CredsFile with a
	// credentials (JWT) file.
	NKeySeedFile, CredsFile string
	// TLSCAFile is the CA bundle that verifies the server; TLSCertFile and
	// TLSKeyFile are the client certificate and key, set together.
	TLSCAFile, TLSCertFile, TLSKeyFile string
	// Dialer, when set, makes every TCP connection (reconnects too), e.g.
	// one that sends the credentials only to a server run by the expected
	// local user (internal/peerowner).
	Dialer nats.CustomDialer
}

// withDefaults returns o with every zero field set to its default.
func (o Options) withDefaults() Options {
	if o.URL == "" {
		o.URL = nats.DefaultURL
	}
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if o.Stream == "" {
		o.Stream = DefaultStream
	}
	if o.MaxAge <= 0 {
		o.MaxAge = DefaultMaxAge
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.Replicas <= 0 {
		o.Replicas = 1
	}
	if o.APIPrefix == "" {
		o.APIPrefix = DefaultAPIPrefix
	}
	if o.Name == "" {
		o.Name = DefaultName
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.MaxPayload <= 0 {
		o.MaxPayload = DefaultMaxPayload
	}
	if o.ReconnectWait <= 0 {
		o.ReconnectWait = DefaultReconnectWait
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = DefaultRequestTimeout
	}
	if o.RouterPendingMsgs <= 0 {
		o.RouterPendingMsgs = DefaultRouterPendingMsgs
	}
	if o.RouterPendingBytes <= 0 {
		o.RouterPendingBytes = DefaultRouterPendingBytes
	}
	if o.StreamCheckEvery == 0 {
		o.StreamCheckEvery = DefaultStreamCheckEvery
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// natsOptions returns the nats.go options for o's authentication and TLS.
// Every connection is dialed through quietReadDialer (reads that do not
// wake the runtime's monitor thread; o.Dialer, when set, dials), whose
// reads call hook first (the event subscription's routing, routerQueue).
func (o Options) natsOptions(hook *routerHook) ([]nats.Option, error) {
	opts := []nats.Option{nats.SetCustomDialer(quietReadDialer{inner: o.Dialer, hook: hook})}
	if o.User != "" || o.Password != "" {
		opts = append(opts, nats.UserInfo(o.User, o.Password))
	}
	if o.Token != "" {
		opts = append(opts, nats.Token(o.Token))
	}
	if o.NKeySeedFile != "" {
		opt, err := nats.NkeyOptionFromSeed(o.NKeySeedFile)
		if err != nil {
			return nil, fmt.Errorf("nkey seed file: %w", err)
		}
		opts = append(opts, opt)
	}
	if o.CredsFile != "" {
		opts = append(opts, nats.UserCredentials(o.CredsFile))
	}
	if o.TLSCAFile != "" {
		opts = append(opts, nats.RootCAs(o.TLSCAFile))
	}
	if (o.TLSCertFile == "") != (o.TLSKeyFile == "") {
		return nil, errors.New("tls: a client certificate needs both a cert and a key file")
	}
	if o.TLSCertFile != "" {
		opts = append(opts, nats.ClientCert(o.TLSCertFile, o.TLSKeyFile))
	}
	return opts, nil
}

// Listener is a connection to NATS that serves finalizer's subscriptions,
// stream, API and publishing. It is safe for concurrent use. Create it with
// Dial and release it with Close.
type Listener struct {
	opts     Options
	log      *zap.Logger
	nc       *nats.Conn
	js       jetstream.JetStream
	prefix   []string // the prefix's tokens
	parse    func([]byte, progress.Kind) (*progress.Event, error)
	warn     *lograte.Limiter
	inflight chan struct{} // API requests in flight

	ctx    context.Context // canceled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // maintenance and API handler goroutines

	reconnected chan struct{} // a reconnect to handle, buffered 1
	retryKick   chan struct{} // a failed catch-up to retry, buffered 1
	streamKick  chan struct{} // an advisory says the stream may be gone, buffered 1
	slowKick    chan struct{} // the event subscription dropped messages, buffered 1
	rescanKick  chan struct{} // a discovery asked for a rescan (DiscoverySubscription.Rescan), buffered 1
	rescanNow   chan struct{} // a reconnect asks for the rescans at once, without their backoff; buffered 1
	connClosed  chan struct{} // closed once the connection is closed

	mu         sync.Mutex
	closed     bool
	ensured    bool                 // EnsureStream succeeded once: redo it after reconnects
	stream     jetstream.Stream     // the event stream, once known
	created    time.Time            // the ensured stream's creation time: another means it was replaced
	recreating bool                 // checkStream counted the stream's loss and creates it again
	advisories []*nats.Subscription // the stream's purge and deletion advisories
	differs    string               // the differences EnsureStream last logged
	pubJS      int                  // publish through JetStream: 0 unknown, 1 yes, -1 no
	runs       map[*RunSubscription]struct{}
	discover   map[*DiscoverySubscription]struct{}
	api        map[*APISubscription]struct{}
	retry      map[*RunSubscription]struct{} // run subscriptions whose catch-up failed
	holds      int                           // HoldCatchUps not released yet
	held       map[*RunSubscription]uint64   // run subscriptions whose catch-up waits for the release; not 0: offered the snapshot's started and progress when held (holdCatchUp), from the snapshot of streamGen value-1
	snap       *retainedSnapshot             // what a Retained under the hold read, for the release
	late       map[string]bool               // run ids not offered early under the hold (OfferLate); cleared at the release
	streamGen  uint64                        // bumped when what the stream held may be gone (streamChanged)
	// rescanCancel cancels the rescan in flight (rescanLoop), nil when
	// none: a reconnect ends it, its reads being the old connection's.
	rescanCancel context.CancelFunc

	// The event subscription and its routing table (ADR 0009).
	routerMu      sync.Mutex
	router        *nats.Subscription          // <prefix>.*.*.*, made by the first Subscribe or Discover
	rq            atomic.Pointer[routerQueue] // its channel and routing (routerQueue), set with it
	routerFlushed bool
	routeMu       sync.RWMutex
	routes        map[string][]*RunSubscription // run id -> its run subscriptions
	discs         []*DiscoverySubscription      // discovery subscriptions

	afterFlush func() // test hook: between a run's subscription and its catch-up
	closeOnce  sync.Once

	// Connection health (ConnStats).
	slowConsumer atomic.Int64 // slow-consumer errors of this client
	disconnects  atomic.Int64 // disconnections with an error
}

// ConnStats is the health of the listener's connection: what would show
// that the service is not keeping up with NATS.
type ConnStats struct {
	// SlowConsumer counts nats.ErrSlowConsumer errors: a subscription's
	// pending limits were exceeded and the client dropped messages.
	SlowConsumer int64
	// Dropped is the number of messages the event subscription dropped
	// (nats.Subscription.Dropped), since it was made.
	Dropped int64
	// Disconnects counts disconnections with an error, among them a
	// server that cut the client off as a slow consumer.
	Disconnects int64
}

// ConnStats returns the connection's health counters.
func (l *Listener) ConnStats() ConnStats {
	st := ConnStats{SlowConsumer: l.slowConsumer.Load(), Disconnects: l.disconnects.Load()}
	l.routerMu.Lock()
	if l.router != nil {
		if n, err := l.router.Dropped(); err == nil {
			st.Dropped = int64(n)
		}
	}
	l.routerMu.Unlock()
	return st
}

// Dial connects to NATS and returns a Listener. It retries a failed initial
// connect until ctx is done (then the error wraps the last failure; an
// authentication or configuration error fails at once). Once connected it
// reconnects forever, logging every disconnect and reconnect; after a
// reconnect it re-ensures the stream (if EnsureStream succeeded before),
// and every run subscription catches up from JetStream again, so nothing
// published while the connection was down is missed.
func Dial(ctx context.Context, o Options) (*Listener, error) {
	o = o.withDefaults()
	prefix, err := splitPrefix(o.Prefix)
	if err != nil {
		return nil, err
	}
	if _, err := splitPrefix(o.APIPrefix); err != nil {
		return nil, fmt.Errorf("api prefix: %w", err)
	}
	hook := new(routerHook)
	authOpts, err := o.natsOptions(hook)
	if err != nil {
		return nil, err
	}
	lctx, cancel := context.WithCancel(context.Background())
	l := &Listener{
		opts:        o,
		log:         o.Logger,
		prefix:      prefix,
		parse:       progress.Parse,
		warn:        lograte.New(o.Now, DefaultWarnEvery),
		inflight:    make(chan struct{}, DefaultMaxInflightAPI),
		ctx:         lctx,
		cancel:      cancel,
		reconnected: make(chan struct{}, 1),
		retryKick:   make(chan struct{}, 1),
		streamKick:  make(chan struct{}, 1),
		slowKick:    make(chan struct{}, 1),
		rescanKick:  make(chan struct{}, 1),
		rescanNow:   make(chan struct{}, 1),
		retry:       make(map[*RunSubscription]struct{}),
		held:        make(map[*RunSubscription]uint64),
		connClosed:  make(chan struct{}),
		runs:        make(map[*RunSubscription]struct{}),
		discover:    make(map[*DiscoverySubscription]struct{}),
		api:         make(map[*APISubscription]struct{}),
		routes:      make(map[string][]*RunSubscription),
	}
	var closedOnce sync.Once
	opts := append([]nats.Option{
		nats.Name(o.Name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(o.ReconnectWait),
		nats.DrainTimeout(o.RequestTimeout),
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			if err == nil && l.isClosed() {
				// Our own Close (it logs "nats connection closed"):
				// not a disconnect for an operator to look at.
				return
			}
			l.disconnects.Add(1)
			l.log.Warn("nats disconnected", zap.Error(err))
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			l.log.Info("nats reconnected", zap.String("url", redact.URLs(nc.ConnectedUrl())))
			select {
			case l.reconnected <- struct{}{}:
			default:
			}
		}),
		nats.ClosedHandler(func(*nats.Conn) {
			closedOnce.Do(func() { close(l.connClosed) })
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			subj := ""
			if sub != nil {
				subj = sub.Subject
			}
			if errors.Is(err, nats.ErrSlowConsumer) {
				l.slowConsumer.Add(1)
			}
			if errors.Is(err, nats.ErrSlowConsumer) && l.isRouter(sub) {
				// Reported once per episode: recover what it drops.
				l.log.Warn("the event subscription is a slow consumer and drops messages; every run catches up "+
					"from the stream once the backlog is down", zap.String("subject", subj))
				select {
				case l.slowKick <- struct{}{}:
				default:
				}
				return
			}
			if ok, n := l.warn.Allow(zapcore.WarnLevel, "nats-error"); ok {
				l.log.Warn("nats asynchronous error", zap.String("subject", subj),
					zap.Error(err), zap.Int("suppressed", n))
			}
		}),
	}, authOpts...)

	if err := checkURLs(o.URL); err != nil {
		cancel()
		return nil, err
	}
	redacted := redact.URLs(o.URL)
	wait := 100 * time.Millisecond
	for {
		nc, err := nats.Connect(o.URL, opts...)
		if err == nil {
			l.nc = nc
			break
		}
		if !retryable(err) {
			cancel()
			return nil, fmt.Errorf("connect to %s: %w", redacted, redact.Error(err, o.URL))
		}
		l.log.Debug("nats not reachable yet", zap.String("url", redacted), zap.Error(redact.Error(err, o.URL)))
		select {
		case <-ctx.Done():
			cancel()
			return nil, fmt.Errorf("connect to %s: %w (gave up: %v)", redacted, redact.Error(err, o.URL), ctx.Err())
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Second)
	}
	l.js, err = jetstream.New(l.nc)
	if err != nil {
		cancel()
		l.nc.Close()
		return nil, fmt.Errorf("jetstream context: %w", err)
	}
	l.log.Info("nats connected", zap.String("url", redact.URLs(l.nc.ConnectedUrl())))
	l.wg.Add(2)
	go l.maintain()
	go l.rescanLoop()
	hook.l.Store(l)
	return l, nil
}

// retryable reports whether a failed initial connect may succeed later.
func retryable(err error) bool {
	var ne net.Error
	return errors.Is(err, nats.ErrNoServers) || errors.Is(err, nats.ErrTimeout) || errors.As(err, &ne)
}

// checkURLs parses each URL of a comma-separated list as nats.Connect
// does (a URL without a scheme is nats://), so a URL that cannot parse
// fails at once instead of being retried until the deadline, and its
// error never prints the password: url.Error's text holds the whole URL.
func checkURLs(list string) error {
	for _, p := range strings.Split(list, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		if !strings.Contains(p, "://") {
			p = "nats://" + p
		}
		if _, err := url.Parse(p); err != nil {
			reason := err
			var ue *url.Error
			if errors.As(err, &ue) {
				reason = ue.Err
			}
			return fmt.Errorf("NATS URL %s does not parse: %v", redact.URLs(p), reason)
		}
	}
	return nil
}

// maintain handles reconnects until Close: re-ensure the stream, catch up
// every run subscription, ask for a rescan for runs to discover (which
// rescanLoop runs). It also retries the catch-ups that failed (the stream
// had no leader, JetStream did not answer in time), with a delay from
// DefaultRetryMin doubling to DefaultRetryMax, until each succeeds or its
// subscription ends, and says the warnings held back (reportHeld).
func (l *Listener) maintain() {
	defer l.wg.Done()
	delay := DefaultRetryMin
	var retry <-chan time.Time
	var check <-chan time.Time
	if l.opts.StreamCheckEvery > 0 {
		t := time.NewTicker(l.opts.StreamCheckEvery)
		defer t.Stop()
		check = t.C
	}
	held := time.NewTicker(lograte.ReportEvery)
	defer held.Stop()
	for {
		select {
		case <-l.ctx.Done():
			l.reportHeld(true)
			return
		case <-held.C:
			l.reportHeld(false)
		case <-check:
			l.checkStream()
		case <-l.streamKick:
			l.checkStream()
		case <-l.slowKick:
			l.afterSlowConsumer()
		case <-l.reconnected:
			l.afterReconnect()
		case <-l.retryKick:
		case <-retry:
			retry = nil
			l.retryCatchUps()
		}
		switch {
		case l.pendingCatchUps() == 0:
			delay, retry = DefaultRetryMin, nil
		case retry == nil:
			retry = time.After(delay)
			delay = min(2*delay, DefaultRetryMax)
		}
	}
}

// reportHeld says, one line per class (lograte.HeldMsg), the warnings
// the listener held back in an interval that has ended with no later
// warning of their class going out to count them (a lone burst of dropped
// events). maintain calls it every lograte.ReportEvery and once when it
// stops, with all: then every class with warnings held back is said, its
// interval ended or not (ADR 0022, addendum of 2026-12-06).
func (l *Listener) reportHeld(all bool) { l.warn.Report(l.log, "listener", all) }

// pendingCatchUps returns how many catch-ups wait for a retry.
func (l *Listener) pendingCatchUps() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.retry)
}

// catchUpLater queues s's catch-up for maintain to retry.
func (l *Listener) catchUpLater(s *RunSubscription, err error) {
	l.mu.Lock()
	_, live := l.runs[s]
	if live {
		l.retry[s] = struct{}{}
	}
	l.mu.Unlock()
	if !live {
		return
	}
	if ok, n := l.warn.Allow(zapcore.WarnLevel, "catch-up"); ok {
		l.log.Warn("catch-up from the stream failed; retrying", zap.String("query_id", s.queryID),
			zap.String("run_id", s.runID), zap.Error(err), zap.Int("suppressed", n))
	}
	select {
	case l.retryKick <- struct{}{}:
	default:
	}
}

// retryCatchUps retries the queued catch-ups once each.
func (l *Listener) retryCatchUps() {
	l.mu.Lock()
	subs := make([]*RunSubscription, 0, len(l.retry))
	for s := range l.retry {
		subs = append(subs, s)
	}
	l.mu.Unlock()
	if len(subs) >= BatchCatchUpMin && !l.nc.IsReconnecting() {
		// Many (every run, once more, after a reconnect): one scan.
		if err := l.scanCatchUp(l.ctx, subs, nil, nil); err != nil {
			l.log.Warn("retried catch-up from the stream failed; retrying", zap.Int("runs", len(subs)), zap.Error(err))
			return
		}
		l.mu.Lock()
		for _, s := range subs {
			delete(l.retry, s)
		}
		l.mu.Unlock()
		return
	}
	ok := 0
	for _, s := range subs {
		if l.ctx.Err() != nil || l.nc.IsReconnecting() {
			return // the reconnect catches everyone up
		}
		ctx, cancel := context.WithTimeout(l.ctx, l.opts.RequestTimeout)
		err := l.catchUp(ctx, s)
		cancel()
		if err != nil {
			continue
		}
		ok++
		l.mu.Lock()
		delete(l.retry, s)
		l.mu.Unlock()
	}
	if ok > 0 {
		l.log.Info("retried catch-ups succeeded", zap.Int("runs", ok), zap.Int("still_failing", len(subs)-ok))
	}
}

// rescanLoop runs the rescans discoveries ask for (Rescan, and every
// reconnect and slow-consumer recovery through catchUpAll), one at a
// time, on a goroutine of its own: a rescan reads every run the stream
// retains and may take seconds (a large stream, a slow server), and run
// on maintain's goroutine it held back the handling of the next
// reconnect, the catch-ups to retry and the stream checks for as long.
// Requests made while one runs are served by one more (coalesced). One
// that failed is retried after a delay from DefaultRetryMin doubling to
// DefaultRetryMax; a reconnect cancels the one in flight (its reads were
// the old connection's) and asks for one at once, without the delay.
func (l *Listener) rescanLoop() {
	defer l.wg.Done()
	delay := DefaultRetryMin
	var retry <-chan time.Time
	for {
		select {
		case <-l.ctx.Done():
			return
		case <-l.rescanNow:
			retry, delay = nil, DefaultRetryMin
		case <-l.rescanKick:
			if retry != nil {
				continue // asked again while a retry waits: the retry serves it
			}
		case <-retry:
			retry = nil
		}
		ctx, cancel := context.WithCancel(l.ctx)
		l.mu.Lock()
		l.rescanCancel = cancel
		l.mu.Unlock()
		failed := l.rescanAsked(ctx)
		l.mu.Lock()
		l.rescanCancel = nil
		l.mu.Unlock()
		interrupted := ctx.Err() != nil
		cancel()
		switch {
		case l.ctx.Err() != nil:
			return
		case interrupted:
			// A reconnect ended it and asked again (rescanNow).
		case failed:
			retry = time.After(delay)
			delay = min(2*delay, DefaultRetryMax)
		default:
			delay = DefaultRetryMin
		}
	}
}

// rescanAfterReconnect ends the rescan in flight, if any, and has
// rescanLoop run the discoveries' rescans at once.
func (l *Listener) rescanAfterReconnect(disc []*DiscoverySubscription) {
	for _, s := range disc {
		s.rescan.Store(true)
	}
	l.mu.Lock()
	if l.rescanCancel != nil {
		l.rescanCancel()
	}
	l.mu.Unlock()
	select {
	case l.rescanNow <- struct{}{}:
	default:
	}
}

func (l *Listener) afterReconnect() {
	l.streamChanged()
	l.mu.Lock()
	ensured := l.ensured
	l.stream, l.pubJS = nil, 0
	runs := make([]*RunSubscription, 0, len(l.runs))
	for s := range l.runs {
		runs = append(runs, s)
	}
	disc := make([]*DiscoverySubscription, 0, len(l.discover))
	for s := range l.discover {
		disc = append(disc, s)
	}
	l.mu.Unlock()

	if ensured {
		l.reensure()
	}
	// Subscriptions were re-sent before the reconnect callback; a flush
	// makes sure the server has them before the catch-up reads the stream.
	ctx, cancel := context.WithTimeout(l.ctx, l.opts.RequestTimeout)
	err := l.nc.FlushWithContext(ctx)
	cancel()
	if err != nil {
		l.log.Warn("flush after reconnect", zap.Error(err))
		return
	}
	failed := l.catchUpAll(runs, nil)
	l.rescanAfterReconnect(disc)
	l.log.Info("caught up after reconnect", zap.Int("runs", len(runs)), zap.String("failed", failed))
}

// catchUpAll catches every run subscription of runs up from the stream
// (one scan of the stream for many runs, a lookup each for a few; a run
// whose catch-up failed is retried on its own, and every one gets a
// second look shortly after) and asks each discovery of disc for a
// rescan of the retained runs (rescanLoop runs it, off this goroutine).
// It returns the first failure's text, "" without.
func (l *Listener) catchUpAll(runs []*RunSubscription, disc []*DiscoverySubscription) string {
	failed := ""
	if err := l.catchUpMany(l.ctx, runs, nil, nil); err != nil {
		failed = err.Error()
	}
	// Once more, shortly: on a cluster, the replica that answered may lag
	// the leader by a message, and the other servers learn of the new
	// subscription a moment after this one; an event published in that
	// moment was neither delivered nor read.
	l.mu.Lock()
	for _, s := range runs {
		if _, live := l.runs[s]; live {
			l.retry[s] = struct{}{}
		}
	}
	l.mu.Unlock()
	for _, s := range disc {
		s.Rescan()
	}
	return failed
}

// subscriptions returns the live run and discovery subscriptions.
func (l *Listener) subscriptions() ([]*RunSubscription, []*DiscoverySubscription) {
	l.mu.Lock()
	defer l.mu.Unlock()
	runs := make([]*RunSubscription, 0, len(l.runs))
	for s := range l.runs {
		runs = append(runs, s)
	}
	disc := make([]*DiscoverySubscription, 0, len(l.discover))
	for s := range l.discover {
		disc = append(disc, s)
	}
	return runs, disc
}

// afterSlowConsumer recovers what the event subscription dropped as a slow
// consumer (its backlog beyond its channel, routerChanLen: a flood of large
// payloads): once the backlog is down to half the channel, every run is caught up from the stream, which holds
// each run's newest events, and discovery rescans. When more was dropped
// meanwhile, it does so again. It runs on maintain's goroutine.
func (l *Listener) afterSlowConsumer() {
	l.routerMu.Lock()
	sub := l.router
	l.routerMu.Unlock()
	if sub == nil {
		return
	}
	for round := 1; l.ctx.Err() == nil; round++ {
		before, err := sub.Dropped()
		if err != nil {
			return // unsubscribed: closing
		}
		q := l.rq.Load()
		for {
			if q == nil || len(q.ch) <= cap(q.ch)/2 {
				break
			}
			select {
			case <-l.ctx.Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
		runs, disc := l.subscriptions()
		failed := l.catchUpAll(runs, disc)
		after, err := sub.Dropped()
		l.log.Info("caught up after the event subscription dropped messages (slow consumer)",
			zap.Int("runs", len(runs)), zap.String("failed", failed), zap.Int("dropped", after), zap.Int("round", round))
		if err != nil || after == before {
			return
		}
	}
}

// reensure runs EnsureStream after a reconnect, retrying with backoff for
// up to DefaultReensureFor: a restarted server may accept clients before its
// JetStream answers.
func (l *Listener) reensure() {
	deadline := time.Now().Add(DefaultReensureFor)
	wait := 100 * time.Millisecond
	for {
		ctx, cancel := context.WithTimeout(l.ctx, l.opts.RequestTimeout)
		err := l.EnsureStream(ctx)
		cancel()
		if err == nil {
			return
		}
		if l.ctx.Err() != nil {
			return
		}
		if time.Now().Add(wait).After(deadline) {
			l.log.Error("re-ensure stream after reconnect: giving up; catch-up and recovery are off until the next reconnect",
				zap.String("stream", l.opts.Stream), zap.Error(err))
			return
		}
		l.log.Warn("re-ensure stream after reconnect", zap.String("stream", l.opts.Stream),
			zap.Duration("retry_in", wait), zap.Error(err))
		select {
		case <-l.ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// Ready reports whether the listener can serve: connected, and JetStream
// answering if the stream was ensured. It is meant for a readiness probe
// and waits at most Options.RequestTimeout.
func (l *Listener) Ready(ctx context.Context) error {
	l.mu.Lock()
	closed, ensured := l.closed, l.ensured
	l.mu.Unlock()
	if closed {
		return ErrClosed
	}
	if st := l.nc.Status(); st != nats.CONNECTED {
		return fmt.Errorf("%w (%s)", ErrNotConnected, strings.ToLower(st.String()))
	}
	if !ensured {
		return nil
	}
	// Bounded even under a longer ctx: a request made just as the
	// connection drops waits for the reconnect.
	ctx, cancel := context.WithTimeout(ctx, l.opts.RequestTimeout)
	defer cancel()
	if _, err := l.js.AccountInfo(ctx); err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	return nil
}

// Close stops the API handlers (waiting for those in flight, whose context
// it cancels), then drains the connection: messages already received are
// still delivered to their subscriptions. It blocks until the connection is
// closed or the drain timed out. It is safe to call more than once; later
// calls return at once.
func (l *Listener) Close() {
	l.closeOnce.Do(func() {
		l.mu.Lock()
		l.closed = true
		api := make([]*APISubscription, 0, len(l.api))
		for s := range l.api {
			api = append(api, s)
		}
		l.mu.Unlock()
		l.cancel()
		for _, s := range api {
			_ = s.Unsubscribe()
		}
		l.wg.Wait()
		if err := l.nc.Drain(); err != nil {
			l.nc.Close()
		}
		select {
		case <-l.connClosed:
		case <-time.After(l.opts.RequestTimeout + time.Second):
			l.nc.Close()
			<-l.connClosed
		}
		l.log.Info("nats connection closed")
	})
}

// isClosed reports whether Close has begun.
func (l *Listener) isClosed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

// withTimeout returns ctx bounded by d when ctx has no deadline.
func (l *Listener) withTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d)
}

// event reports an outcome to Options.OnEvent.
func (l *Listener) event(kind progress.Kind, outcome string) {
	if l.opts.OnEvent != nil {
		l.opts.OnEvent(kind, outcome)
	}
}

// CheckFiles reads o's credential and TLS files as Dial would, without
// connecting: a file that cannot be read or parsed is reported at once,
// named by its config key, instead of at the dial after slower work.
func (o Options) CheckFiles() error {
	var no nats.Options
	check := func(key, file string, opt nats.Option) error {
		if file == "" {
			return nil
		}
		if err := opt(&no); err != nil {
			return fmt.Errorf("nats.%s %s: %w", key, file, err)
		}
		return nil
	}
	if o.NKeySeedFile != "" {
		if _, err := nats.NkeyOptionFromSeed(o.NKeySeedFile); err != nil {
			return fmt.Errorf("nats.nkey_seed_file %s: %w", o.NKeySeedFile, err)
		}
	}
	if o.CredsFile != "" {
		// nats.UserCredentials reads the file at each connect only.
		if _, err := os.ReadFile(o.CredsFile); err != nil {
			return fmt.Errorf("nats.credentials_file: %w", err)
		}
	}
	if (o.TLSCertFile == "") != (o.TLSKeyFile == "") {
		return errors.New("nats.tls_cert_file, nats.tls_key_file: a client certificate needs both a cert and a key file")
	}
	if err := check("tls_ca_file", o.TLSCAFile, nats.RootCAs(o.TLSCAFile)); err != nil {
		return err
	}
	return check("tls_cert_file", o.TLSCertFile, nats.ClientCert(o.TLSCertFile, o.TLSKeyFile))
}
