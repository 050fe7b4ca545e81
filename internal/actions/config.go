// Package actions announces each period that becomes final (issue 19,
// ADR 0020): per rule, a list of actions (a JetStream message, a signed
// webhook, a marker file) fired once per period, in order, after the move
// of the verdict is committed. The moves come from the control table's
// outbox (control.Outbox), written by a trigger in the transaction of the
// move; a Dispatcher expands them into events and delivers them. It does
// no I/O of its own beyond the actions' (HTTP, files): PostgreSQL and NATS
// are behind small interfaces (Outbox, Publisher).
package actions

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/finalizer-dev/finalizer/progress"
)

// The kinds of action.
const (
	KindNATS    = "nats"
	KindWebhook = "webhook"
	KindMarker  = "marker"
)

// Defaults of a webhook.
const (
	DefaultWebhookTimeout   = 10 * time.Second
	DefaultInitialInterval  = time.Second
	DefaultMaxInterval      = 5 * time.Minute
	DefaultMaxAttempts      = 15
	DefaultMaxPending       = 10000
	DefaultSignatureHeader  = "X-Finalizer-Signature"
	DefaultTimestampHeader  = "X-Finalizer-Timestamp"
	DefaultEventIDHeader    = "X-Finalizer-Event-Id"
	defaultMarkerPermission = 0o644
)

// Config is one action of a rule as the config file writes it: exactly
// one of NATS, Webhook and Marker is set.
type Config struct {
	// Name labels the action in metrics, logs and status; empty: the kind
	// (with a number when a config has several different actions of one
	// kind).
	Name    string         `yaml:"name"`
	NATS    *NATSConfig    `yaml:"nats"`
	Webhook *WebhookConfig `yaml:"webhook"`
	Marker  *MarkerConfig  `yaml:"marker"`
}

// NATSConfig publishes each event through JetStream to
// <api prefix>.final.<table>. It has no settings of its own.
type NATSConfig struct{}

// WebhookConfig POSTs each event, signed with HMAC-SHA256.
type WebhookConfig struct {
	// URL receives the POST (http or https).
	URL string `yaml:"url"`
	// SecretEnv names the environment variable holding the signing
	// secret (required; the secret itself is never in the config).
	SecretEnv string `yaml:"secret_env"`
	// Timeout bounds one POST; default 10s.
	Timeout string `yaml:"timeout"`
	// MaxAttempts is how many times an event is tried before it is
	// dead-lettered; default 15.
	MaxAttempts int `yaml:"max_attempts"`
	// InitialInterval and MaxInterval bound the exponential backoff
	// between attempts; default 1s and 5m.
	InitialInterval string `yaml:"initial_interval"`
	MaxInterval     string `yaml:"max_interval"`
	// MaxPending bounds the endpoint's queue (kept in PostgreSQL): events
	// beyond it are dead-lettered at once; default 10000.
	MaxPending int `yaml:"max_pending"`
}

// MarkerConfig writes a file per period, atomically.
type MarkerConfig struct {
	// Path is the file's path template: {table} (escaped to one path
	// element), {period} (the period's start in the rule's time zone:
	// 2006-01-02 for days, 2006-01-02T15 for hours, 2006-01-02T15-04 for
	// minutes), {date}, {year}, {month}, {day}, {hour}, {minute}. E.g.
	// /data/markers/{table}/{period}/_SUCCESS.
	Path string `yaml:"path"`
}

// Action is one validated action.
type Action struct {
	Kind string
	// Name labels the action in metrics, logs and status.
	Name string
	// Key identifies the action's queue in the control database: the
	// kind and a hash of what it delivers to. Actions with the same target
	// share one queue.
	Key string
	// MaxPending bounds the action's queue (0: no bound).
	MaxPending int

	webhook *webhookTarget
	marker  string // the path template
	retry   retryPolicy
}

// retryPolicy is how an action retries a failed delivery.
type retryPolicy struct {
	initial, max time.Duration
	attempts     int
}

// webhookTarget is a webhook's resolved settings.
type webhookTarget struct {
	url     string
	shown   string // the URL without user info or query, for logs and errors
	secret  []byte
	timeout time.Duration
}

// Rule is a tracking rule's table and periods with its actions.
type Rule struct {
	// Table is the rule's table template ({name}, {id}, see
	// finalizer.Rule).
	Table string
	// Granularity and Location are the rule's periods.
	Granularity progress.Granularity
	Location    *time.Location
	Actions     []*Action
}

// ErrConfig is wrapped by every configuration error of Build.
var ErrConfig = errors.New("invalid action")

// Build validates the actions of one rule, field being where they are in
// the config ("tables[2].actions"): an unknown kind, no kind or two, a
// secret's variable that is not set, a marker directory that cannot be
// written are errors that name the field. getenv reads the environment
// (os.Getenv when nil).
func Build(field string, cfgs []Config, getenv func(string) string) ([]*Action, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	var out []*Action
	for i, c := range cfgs {
		f := fmt.Sprintf("%s[%d]", field, i)
		a, err := c.build(f, getenv)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}

func (c Config) build(field string, getenv func(string) string) (*Action, error) {
	var kinds []string
	if c.NATS != nil {
		kinds = append(kinds, KindNATS)
	}
	if c.Webhook != nil {
		kinds = append(kinds, KindWebhook)
	}
	if c.Marker != nil {
		kinds = append(kinds, KindMarker)
	}
	switch len(kinds) {
	case 0:
		return nil, fmt.Errorf("%s: %w: no kind; want one of nats, webhook, marker", field, ErrConfig)
	case 1:
	default:
		return nil, fmt.Errorf("%s: %w: %s in one entry; write one entry per action", field, ErrConfig, strings.Join(kinds, " and "))
	}
	if strings.ContainsAny(c.Name, " \t\n\"") {
		return nil, fmt.Errorf("%s.name %q: %w: no spaces or quotes", field, c.Name, ErrConfig)
	}
	a := &Action{Kind: kinds[0], Name: c.Name}
	switch a.Kind {
	case KindNATS:
		a.Key = KindNATS
		a.MaxPending = DefaultMaxPending
		a.retry = retryPolicy{initial: DefaultInitialInterval, max: DefaultMaxInterval, attempts: DefaultMaxAttempts}
	case KindWebhook:
		if err := a.buildWebhook(field+".webhook", c.Webhook, getenv); err != nil {
			return nil, err
		}
	case KindMarker:
		if err := a.buildMarker(field+".marker", c.Marker); err != nil {
			return nil, err
		}
	}
	return a, nil
}

func (a *Action) buildWebhook(field string, c *WebhookConfig, getenv func(string) string) error {
	u, err := url.Parse(c.URL)
	switch {
	case c.URL == "":
		return fmt.Errorf("%s.url: %w: required", field, ErrConfig)
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return fmt.Errorf("%s.url: %w: want an http:// or https:// URL", field, ErrConfig)
	case c.SecretEnv == "":
		return fmt.Errorf("%s.secret_env: %w: required (the name of the environment variable that holds the signing secret)", field, ErrConfig)
	}
	secret := getenv(c.SecretEnv)
	if secret == "" {
		return fmt.Errorf("%s.secret_env: %w: the environment variable %s is not set or empty", field, ErrConfig, c.SecretEnv)
	}
	shown := (&url.URL{Scheme: u.Scheme, Host: u.Hostname(), Path: u.Path}).String()
	if p := u.Port(); p != "" {
		shown = (&url.URL{Scheme: u.Scheme, Host: u.Hostname() + ":" + p, Path: u.Path}).String()
	}
	t := &webhookTarget{url: c.URL, shown: shown, secret: []byte(secret), timeout: DefaultWebhookTimeout}
	if t.timeout, err = duration(field+".timeout", c.Timeout, DefaultWebhookTimeout); err != nil {
		return err
	}
	a.retry = retryPolicy{attempts: c.MaxAttempts}
	if a.retry.initial, err = duration(field+".initial_interval", c.InitialInterval, DefaultInitialInterval); err != nil {
		return err
	}
	if a.retry.max, err = duration(field+".max_interval", c.MaxInterval, DefaultMaxInterval); err != nil {
		return err
	}
	switch {
	case c.MaxAttempts < 0:
		return fmt.Errorf("%s.max_attempts %d: %w: want a positive number", field, c.MaxAttempts, ErrConfig)
	case c.MaxAttempts == 0:
		a.retry.attempts = DefaultMaxAttempts
	}
	switch {
	case c.MaxPending < 0:
		return fmt.Errorf("%s.max_pending %d: %w: want a positive number", field, c.MaxPending, ErrConfig)
	case c.MaxPending == 0:
		a.MaxPending = DefaultMaxPending
	default:
		a.MaxPending = c.MaxPending
	}
	a.webhook = t
	// The key is the endpoint (with its query, which may hold a token:
	// hashed, never shown).
	a.Key = KindWebhook + ":" + shortHash(c.URL)
	return nil
}

func (a *Action) buildMarker(field string, c *MarkerConfig) error {
	if c.Path == "" {
		return fmt.Errorf("%s.path: %w: required (e.g. /data/markers/{table}/{period}/_SUCCESS)", field, ErrConfig)
	}
	if !filepath.IsAbs(c.Path) {
		return fmt.Errorf("%s.path %q: %w: want an absolute path", field, c.Path, ErrConfig)
	}
	if err := checkTemplate(c.Path); err != nil {
		return fmt.Errorf("%s.path %q: %w: %w", field, c.Path, ErrConfig, err)
	}
	if strings.HasSuffix(c.Path, "/") {
		return fmt.Errorf("%s.path %q: %w: names a directory; end it with the file's name (e.g. _SUCCESS)", field, c.Path, ErrConfig)
	}
	// The fixed part of the path (before the first placeholder) must be a
	// directory the service can create files in: checked now, not at the
	// first period hours later.
	fixed := c.Path
	if i := strings.IndexByte(fixed, '{'); i >= 0 {
		fixed = fixed[:i]
	}
	dir := filepath.Dir(fixed + "x")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("%s.path: %w: directory %s cannot be created: %w", field, ErrConfig, dir, err)
	}
	f, err := os.CreateTemp(dir, ".finalizer-check-*")
	if err != nil {
		return fmt.Errorf("%s.path: %w: directory %s cannot be written: %w", field, ErrConfig, dir, err)
	}
	name := f.Name()
	_ = f.Close()
	_ = os.Remove(name)
	a.marker = c.Path
	a.Key = KindMarker + ":" + shortHash(c.Path)
	a.MaxPending = DefaultMaxPending
	a.retry = retryPolicy{initial: DefaultInitialInterval, max: DefaultMaxInterval, attempts: DefaultMaxAttempts}
	return nil
}

// placeholders are what a marker path may hold.
var placeholders = []string{"{table}", "{period}", "{date}", "{year}", "{month}", "{day}", "{hour}", "{minute}"}

// checkTemplate refuses an unknown or unclosed placeholder.
func checkTemplate(p string) error {
	rest := p
	for _, ph := range placeholders {
		rest = strings.ReplaceAll(rest, ph, "")
	}
	if strings.ContainsAny(rest, "{}") {
		return fmt.Errorf("unknown placeholder; want %s", strings.Join(placeholders, ", "))
	}
	return nil
}

func duration(field, s string, def time.Duration) (time.Duration, error) {
	if s == "" {
		return def, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%s %q: %w: want a positive duration (e.g. 10s)", field, s, ErrConfig)
	}
	return d, nil
}

func shortHash(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:6])
}

// Name gives every action without a name one, unique across rules: the
// kind, numbered when a config has several different actions of a kind.
// Two different actions given the same name are an error.
func Name(rules []Rule) error {
	byKind := map[string][]string{} // kind -> keys, in order
	seen := map[string]bool{}
	for _, r := range rules {
		for _, a := range r.Actions {
			if a.Name == "" && !seen[a.Key] {
				byKind[a.Kind] = append(byKind[a.Kind], a.Key)
			}
			seen[a.Key] = true
		}
	}
	names := map[string]string{} // key -> name
	for kind, keys := range byKind {
		for i, k := range keys {
			names[k] = kind
			if len(keys) > 1 {
				names[k] = fmt.Sprintf("%s-%d", kind, i+1)
			}
		}
	}
	byName := map[string]string{}
	for _, r := range rules {
		for _, a := range r.Actions {
			if a.Name == "" {
				a.Name = names[a.Key]
			}
			if k, ok := byName[a.Name]; ok && k != a.Key {
				return fmt.Errorf("%w: two different actions are named %q; give each its own name", ErrConfig, a.Name)
			}
			byName[a.Name] = a.Key
		}
	}
	return nil
}
