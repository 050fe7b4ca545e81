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
// an unknown kind token gives KindUnknown and false.
func (l *Listener) splitSubject(subject string) (eventSubject, bool) {
	n := len(l.prefix)
	toks := strings.Split(subject, ".")
	if len(toks) != n+3 {
		return eventSubject{kindToken: "unknown"}, false
	}
	for i, p := range l.prefix {
		if toks[i] != p {
			return eventSubject{kindToken: "unknown"}, false
		}
	}
	es := eventSubject{kindToken: toks[n], queryID: toks[n+1], runID: toks[n+2]}
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
