package listener

import (
	"fmt"
	"strings"

	"github.com/finalizer-dev/finalizer/progress"
)

// validToken reports whether s can be used as one subject token.
func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '.', c == '*', c == '>', c <= ' ', c == 0x7f:
			return false
		}
	}
	return true
}

// checkToken returns an error naming what when s is not a valid token.
func checkToken(what, s string) error {
	if !validToken(s) {
		return fmt.Errorf("%s %q: %w", what, s, ErrInvalidToken)
	}
	return nil
}

// splitPrefix returns the tokens of a subject prefix.
func splitPrefix(p string) ([]string, error) {
	toks := strings.Split(p, ".")
	for _, t := range toks {
		if !validToken(t) {
			return nil, fmt.Errorf("subject prefix %q: %w", p, ErrInvalidToken)
		}
	}
	return toks, nil
}

// subject returns <prefix>.<kind>.<queryID>.<runID>.
func (l *Listener) subject(kind, queryID, runID string) string {
	return l.opts.Prefix + "." + kind + "." + queryID + "." + runID
}

// eventSubject is an event subject taken apart.
type eventSubject struct {
	kind           progress.Kind
	kindToken      string
	queryID, runID string
}

// splitSubject takes apart <prefix>.<kind>.<queryId>.<runId>. It returns
// false when the token count or the prefix is wrong or a token is empty;
// an unknown kind token gives KindUnknown and false. It does not allocate:
// the tokens are substrings of subject.
func (l *Listener) splitSubject(subject string) (eventSubject, bool) {
	bad := eventSubject{kindToken: "unknown"}
	rest := subject
	for _, p := range l.prefix {
		tok, after, ok := strings.Cut(rest, ".")
		if !ok || tok != p {
			return bad, false
		}
		rest = after
	}
	kindToken, rest, ok1 := strings.Cut(rest, ".")
	queryID, runID, ok2 := strings.Cut(rest, ".")
	if !ok1 || !ok2 || strings.IndexByte(runID, '.') >= 0 {
		return bad, false
	}
	es := eventSubject{kindToken: kindToken, queryID: queryID, runID: runID}
	kind, ok := progress.ParseKind(es.kindToken)
	es.kind = kind
	if !ok {
		es.kindToken = "unknown"
	}
	return es, ok && es.queryID != "" && es.runID != ""
}

// lastToken returns the subject's last token without allocating.
func lastToken(subject string) string {
	return subject[strings.LastIndexByte(subject, '.')+1:]
}
