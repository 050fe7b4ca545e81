package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/spf13/pflag"

	"github.com/finalizer-dev/finalizer/control"
	"github.com/finalizer-dev/finalizer/finalizer"
	"github.com/finalizer-dev/finalizer/internal/redact"
	"github.com/finalizer-dev/finalizer/internal/service"
)

// exitMissing is the exit code of is-final and wait for a table nothing
// knows: no verdict, and no track, rule or tracker that could write one
// (a misspelled name, most of the time).
const exitMissing = 3

// clientConfig is what status, is-final and wait read: flags (and their
// FINALIZER_* variables) over the --config file over the defaults.
type clientConfig struct {
	postgresURL  string
	dataDir      string
	controlTable string
	configFile   string
	// httpURL is the service's HTTP API: --http-url (or its variable)
	// when set, else the --config file's http.listen, else the default.
	httpURL string
	rules   []finalizer.Rule
	managed bool // postgresURL is the managed cluster's, read from dataDir
}

// addPostgresClientFlags adds the flags of the commands that read the
// control table.
func addPostgresClientFlags(fs *pflag.FlagSet) {
	fs.String("config", "", "the service's YAML config file: control_table, data_dir, postgres.url and tables come from it")
	fs.String("postgres-url", "", "PostgreSQL URL (empty: the managed cluster of --data-dir, while serve runs)")
	fs.String("data-dir", DefaultDataDir, "data dir of the serve whose managed PostgreSQL to read")
	fs.String("control-table", control.DefaultTable, "control table, schema-qualified")
}

// resolveClient merges the defaults, the --config file and the flags.
func resolveClient(fs *pflag.FlagSet) (clientConfig, error) {
	cfg := defaultConfig()
	file, _ := fs.GetString("config")
	if file != "" {
		if err := loadConfigFile(file, &cfg); err != nil {
			return clientConfig{}, err
		}
	}
	rules, err := cfg.rules()
	if err != nil {
		return clientConfig{}, err
	}
	c := clientConfig{postgresURL: cfg.Postgres.URL, dataDir: cfg.DataDir, controlTable: cfg.ControlTable, configFile: file, rules: rules}
	for name, dst := range map[string]*string{"postgres-url": &c.postgresURL, "data-dir": &c.dataDir, "control-table": &c.controlTable} {
		if f := fs.Lookup(name); f.Changed || *dst == "" {
			*dst = f.Value.String()
		}
	}
	if f := fs.Lookup("http-url"); f != nil {
		c.httpURL = f.Value.String()
		from := "--http-url"
		if !f.Changed && file != "" {
			c.httpURL, from = listenURL(cfg.HTTP.Listen), "http.listen of "+file
		}
		// A URL no request can be made to is a usage error (exit 2), not
		// a service that "did not answer".
		if u, err := url.Parse(c.httpURL); c.httpURL != "" && (err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "") {
			return clientConfig{}, fmt.Errorf("%s %q is not an http:// or https:// URL with a host (\"\" skips the service)", from, redact.URLs(c.httpURL))
		}
	}
	return c, nil
}

// listenURL is the URL a client on this host reaches an HTTP listen
// address at: a wildcard host is the loopback, "" or "off" (no HTTP API)
// is "".
func listenURL(listen string) string {
	if listen == "" || listen == "off" {
		return ""
	}
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "http://" + listen // refused by serve; the client's error says so
	}
	switch ip := net.ParseIP(host); {
	case host == "":
		host = "127.0.0.1"
	case ip != nil && ip.IsUnspecified() && ip.To4() != nil:
		host = "127.0.0.1"
	case ip != nil && ip.IsUnspecified():
		host = "::1"
	}
	return "http://" + net.JoinHostPort(host, port)
}

// openStore opens the control table for a client command.
func openStore(ctx context.Context, fs *pflag.FlagSet) (*control.Store, clientConfig, error) {
	c, err := resolveClient(fs)
	if err != nil {
		return nil, c, usageError(err)
	}
	url := c.postgresURL
	if url == "" {
		raw, err := os.ReadFile(filepath.Join(c.dataDir, service.PostgresURLFile))
		if err != nil {
			return nil, c, usageError(fmt.Errorf("no --postgres-url, and no managed PostgreSQL under %s (start `finalizer serve --data-dir %s`, or pass --postgres-url)", c.dataDir, c.dataDir))
		}
		url, c.managed = strings.TrimSpace(string(raw)), true
	}
	s, err := control.Open(ctx, url, control.Options{Table: c.controlTable, MaxConns: 2})
	if err != nil {
		return nil, c, usageError(err)
	}
	if err := s.CheckSchema(ctx); err != nil {
		s.Close()
		switch {
		case errors.Is(err, control.ErrNotMigrated):
			return nil, c, usageError(fmt.Errorf("control table %s does not exist yet: start `finalizer serve` once to create it", c.controlTable))
		case c.managed && errors.Is(err, control.ErrUnavailable) && ctx.Err() == nil:
			return nil, c, usageError(managedDown(c.dataDir))
		}
		return nil, c, usageError(err)
	}
	return s, c, nil
}

// managedDown says why the managed PostgreSQL of dataDir does not answer:
// its serve is stopped, or it runs (starting, or its PostgreSQL stopped
// under it: its log says which), so that an operator does not start a
// second serve on a data dir in use.
func managedDown(dataDir string) error {
	if pid, ok := service.RunningServe(dataDir); ok {
		return fmt.Errorf("the managed PostgreSQL of data dir %s does not answer, although its serve runs (pid %d): it is starting, or its PostgreSQL stopped under it (see the serve's log; restarting that serve starts it again), or pass --postgres-url", dataDir, pid)
	}
	return fmt.Errorf("the managed PostgreSQL of data dir %s is not running (its serve is stopped): start `finalizer serve --data-dir %s`, or pass --postgres-url", dataDir, dataDir)
}

// knownTable reports whether something could write the table's verdict
// although it has none yet: a feeder row (an expected feeder of a rule, a
// joined query: the table is held by it), an explicit track not yet done,
// a rule of the --config file whose table (template) matches, or a tracker
// or a feeder's join wait of the running service (read from its HTTP API
// when reachable). It returns what holds the table when that is known
// ("held by e-one: expected, never reported"), else "". When nothing could
// write it, it returns an error with exit code 3 that names the table and
// the closest table with a verdict, and ends with hint: what the command
// offers for a table whose first verdict is still to come (missingHint).
func knownTable(ctx context.Context, s *control.Store, c clientConfig, table, httpToken, hint string) (string, error) {
	feeders, err := s.Feeders(ctx, table)
	if err != nil {
		return "", usageError(err)
	}
	runs, waits, runsErr := fetchRunsOf(ctx, c.httpURL, httpToken, table)
	known := runs
	if runsErr != nil || c.httpURL == "" {
		known = nil
	}
	// What holds it, with its runs' held reasons: a join first, as status
	// says, then the feeders and the runs the service holds.
	why := withRunsUnknown(holdWhy(control.Verdict{Table: table}, feeders, known, joinWaitsByTable(waits)), c.httpURL, runsErr)
	if len(feeders) > 0 || serviceWrites(nil, waits, table) {
		return why, nil
	}
	tracks, err := s.Tracks(ctx)
	if err != nil {
		return "", usageError(err)
	}
	for _, t := range tracks {
		if t.Table == table {
			return why, nil
		}
	}
	for _, r := range c.rules {
		if ruleCouldWrite(r, table) {
			return why, nil
		}
	}
	if serviceWrites(runs, waits, table) {
		return why, nil
	}
	msg := fmt.Sprintf("unknown table %q: it has no verdict, and no explicit track", table)
	if c.configFile != "" {
		msg += ", no rule in " + c.configFile
	} else {
		msg += " (pass the service's --config to count its rules)"
	}
	if runsErr != nil {
		// Never claim what was not asked: a tracker of a declarative rule
		// writes a table before its first verdict.
		msg += fmt.Sprintf(", and the service's trackers were not counted (%v; pass the running service's --http-url and --http-token)", runsErr)
	} else {
		msg += " and no tracker of the service writes it"
	}
	msg += suggestTable(ctx, s, table)
	msg += hint
	return "", &exitError{code: exitMissing, err: errors.New(msg)}
}

// holdWhy says why table v (its row, or only its name before its first
// verdict) is not final, from its feeders, the service's runs (nil: not
// known) and join waits (by table): tableStatus.why, the text of is-final,
// wait and GET /v1/tables/{table}/final; "" when nothing known holds it.
func holdWhy(v control.Verdict, feeders []control.Feeder, runs []finalizer.TrackerStatus, waits map[string][]finalizer.JoinWait) string {
	// The names it says are capped (whyName), on copies: five runs of a
	// query named with a thousand control characters made a 24 KB line.
	feeders = slices.Clone(feeders)
	for i, f := range feeders {
		feeders[i].QueryName = whyName(f.Name())
	}
	runs = slices.Clone(runs)
	for i, r := range runs {
		runs[i].QueryName = whyQuery(r.QueryName, r.QueryID)
	}
	if ws := waits[v.Table]; len(ws) > 0 {
		ws = slices.Clone(ws)
		for i, w := range ws {
			ws[i].QueryName = whyQuery(w.QueryName, w.QueryID)
			ws[i].LastError = capRunes(field(w.LastError), whyReasonLen)
		}
		waits = map[string][]finalizer.JoinWait{v.Table: ws}
	}
	st := []tableStatus{toTableStatus(v, time.Now().UTC(), runs, feeders)}
	attachJoinWaits(st, waits)
	return st[0].why()
}

// whyQuery is the name the why gives a query: its name, capped (whyName);
// without one, its id capped when longer than whyNameLen (the why then
// says it in place of the id's short form); else "" (the id's short form
// is said).
func whyQuery(name, id string) string {
	switch {
	case name != "":
		return whyName(name)
	case len(id) > whyNameLen:
		return whyName(id)
	}
	return ""
}

// whyNameLen bounds a query's name as the why says it, in runes once its
// control characters are escaped (status says it whole).
const whyNameLen = 100

// whyName is a query's name as the why says it: escaped (field), then cut
// to whyNameLen runes, with an ellipsis. field leaves it as it is, so the
// why's own escaping does not grow it again.
func whyName(name string) string {
	return capRunes(field(name), whyNameLen)
}

// capRunes is s cut to n runes, with an ellipsis when it was longer.
func capRunes(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n]) + "…"
}

// runsUnknown is what the why adds when the service's runs could not be
// read from base (err, fetchRuns's, already redacted): without it, "no
// verdict of its own yet (unknown)" read as if the service held nothing.
func runsUnknown(base string, err error) string {
	kind, answered := errKind(err)
	if answered {
		return fmt.Sprintf("the runs' reasons are not known: the service at %s answered %s", redact.URLs(base), kind)
	}
	return fmt.Sprintf("the runs' reasons are not known: the service at %s did not answer (%s)", redact.URLs(base), kind)
}

// errKind is the short kind of a client's error, as the why and wait's
// notes say it: "connection refused", "timed out", "no such host", a
// status the service answered (answered true), else the error's last
// part, escaped and capped. err is already redacted.
func errKind(err error) (kind string, answered bool) {
	var st *statusError
	var dns *net.DNSError
	var ne net.Error
	switch {
	case errors.As(err, &st):
		return field(st.status), true
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused", false
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timed out", false
	case errors.As(err, &dns):
		return "no such host", false
	}
	msg := err.Error()
	if i := strings.LastIndex(msg, ": "); i >= 0 {
		msg = msg[i+2:]
	}
	return capRunes(field(msg), whyNameLen), false
}

// whyNotFinal is holdWhy for table read by the commands: its feeders from
// s, the runs and join waits from the service's HTTP API (none when it is
// not reachable or --http-url is ""). "" when nothing could be read, or
// nothing known holds it: the answer is "not final" without a reason then,
// never an error (exit codes stay what they were).
func whyNotFinal(ctx context.Context, s *control.Store, c clientConfig, v control.Verdict, httpToken string) string {
	feeders, err := s.Feeders(ctx, v.Table)
	if err != nil {
		return ""
	}
	runs, waits, runsErr := fetchRunsOf(ctx, c.httpURL, httpToken, v.Table)
	if runsErr != nil || c.httpURL == "" {
		runs = nil
	}
	return withRunsUnknown(holdWhy(v, feeders, runs, joinWaitsByTable(waits)), c.httpURL, runsErr)
}

// withRunsUnknown is why, and then runsUnknown when runsErr says the
// service's runs could not be read.
func withRunsUnknown(why, base string, runsErr error) string {
	if runsErr == nil || base == "" {
		return why
	}
	if why != "" {
		why += "; "
	}
	return why + runsUnknown(base, runsErr)
}

// missingHint is the end of knownTable's error for each command: is-final
// and wait have --allow-missing, status has not.
var missingHint = map[string]string{
	"is-final": "; --allow-missing treats it as not final yet (exit 1)",
	"wait":     "; --allow-missing waits for its first verdict",
	"status":   "; `finalizer status` lists the tables it knows",
}

// suggestTable is what the commands add to an unknown table's error: the
// nearest name with a verdict ("; did you mean \"bronze.orders\"?"), or
// the tables with a verdict when there are few, or "".
func suggestTable(ctx context.Context, s *control.Store, table string) string {
	vs, err := s.List(ctx)
	if err != nil {
		return ""
	}
	names := make([]string, 0, len(vs))
	for _, v := range vs {
		names = append(names, v.Table)
	}
	switch near := nearestName(table, names); {
	case near != "":
		return fmt.Sprintf("; did you mean %q?", near)
	case len(names) > 0 && len(names) <= 5:
		return "; tables with a verdict: " + strings.Join(names, ", ")
	}
	return ""
}

// noVerdict is the error of an operator command (rewind, acknowledge) on a
// table without a verdict: its name quoted and the nearest known name, as
// is-final says it (exit 2: nothing to rewind or acknowledge); err when it
// is another error.
func noVerdict(ctx context.Context, s *control.Store, table string, err error) error {
	if !errors.Is(err, control.ErrNotFound) {
		return usageError(err)
	}
	return usageError(fmt.Errorf("no verdict for table %q: nothing to move back or acknowledge%s", table, suggestTable(ctx, s, table)))
}

// serviceWrites reports whether a tracker of the service writes table
// (runs: /v1/runs), or a run waits to join its feeders (waits: the table
// is held by that join before its first row; tracked once it joined).
func serviceWrites(runs []finalizer.TrackerStatus, waits []finalizer.JoinWait, table string) bool {
	for _, r := range runs {
		if r.Table == table {
			return true
		}
	}
	for _, w := range waits {
		if w.Table == table {
			return true
		}
	}
	return false
}

// ruleCouldWrite reports whether a rule can produce table: its template
// ({name}, {id}) matches it, and a name or id the template takes from the
// table is one the rule's query pattern tracks. A template that takes the
// query's name from the table (bronze.{name}) only covers the names its
// query pattern matches, so a typo under a templated prefix is still an
// unknown table. A template with {id} alone covers any id: the query
// pattern may match by a name the table does not show.
func ruleCouldWrite(r finalizer.Rule, table string) bool {
	if !strings.Contains(r.Table, "{") {
		return r.Table == table
	}
	var keys []string
	parts := placeholder.Split(r.Table, -1)
	for _, m := range placeholder.FindAllStringSubmatch(r.Table, -1) {
		keys = append(keys, m[1])
	}
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(p)
	}
	re, err := regexp.Compile("^" + strings.Join(parts, "(.+?)") + "$")
	if err != nil {
		return false
	}
	m := re.FindStringSubmatch(table)
	if m == nil {
		return false
	}
	got := map[string]string{}
	for i, k := range keys {
		if v, seen := got[k]; seen && v != m[i+1] {
			return false
		}
		got[k] = m[i+1]
	}
	name, hasName := got["name"]
	if !hasName {
		return true
	}
	id := got["id"]
	if finalizer.MatchQuery(r.Query, name) {
		return true
	}
	return id != "" && finalizer.MatchQuery(r.Query, id)
}

// placeholder is a table template's {name} or {id}.
var placeholder = regexp.MustCompile(`\{(name|id)\}`)

// nearestName returns the name closest to s when it is near enough to be a
// typo of it.
func nearestName(s string, names []string) string {
	slices.Sort(names)
	best, bestD := "", min(3, max(1, len(s)/3))+1
	for _, n := range names {
		if d := editDistance(s, n); d < bestD {
			best, bestD = n, d
		}
	}
	return best
}
