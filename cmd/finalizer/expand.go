package main

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"

	"gopkg.in/yaml.v3"
)

// bcryptHash is a whole bcrypt hash as nats-server accepts it in a
// password field ($2a$, $2b$, $2x$ or $2y$, a two-digit cost, 53 characters
// of salt and hash). The config file takes one literally: its $ signs are
// never expanded.
var bcryptHash = regexp.MustCompile(`^\$2[abxy]?\$[0-9]{2}\$[./A-Za-z0-9]{53}$`)

// looksLikeHash matches the start of a bcrypt hash: a value that starts so
// but is not a whole hash is refused rather than expanded into a short
// password (before values were expanded after parsing, $2a$11$... became
// "a1").
var looksLikeHash = regexp.MustCompile(`^\$2[abxy]?\$`)

// varName is a variable name $NAME and ${NAME} may expand.
var varName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*`)

// expandNode expands environment variables in every scalar value of the
// parsed config document n, in place; mapping keys are left as written, so
// the file's structure never depends on the environment. See expandValue.
func expandNode(n *yaml.Node) error {
	switch n.Kind {
	case yaml.DocumentNode, yaml.SequenceNode:
		for _, c := range n.Content {
			if err := expandNode(c); err != nil {
				return err
			}
		}
	case yaml.MappingNode:
		for i := 1; i < len(n.Content); i += 2 {
			if err := expandNode(n.Content[i]); err != nil {
				return fmt.Errorf("%s: %w", n.Content[i-1].Value, err)
			}
		}
	case yaml.ScalarNode:
		if !strings.Contains(n.Value, "$") {
			return nil
		}
		v, err := expandValue(n.Value, os.LookupEnv)
		if err != nil {
			return fmt.Errorf("line %d: %w", n.Line, err)
		}
		if v != n.Value && n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle|yaml.LiteralStyle|yaml.FoldedStyle) == 0 {
			// A plain scalar is typed by what it says once expanded
			// ("insecure: $INSECURE" with INSECURE=true is a bool).
			n.Tag = ""
		}
		n.Value = v
	}
	return nil
}

// expandValue expands one scalar value of the config file: ${NAME} and
// $NAME (a letter or _, then letters, digits and _) are replaced by the
// variable's value, empty when it is unset; $$ is one $; a $ before
// anything else stays as it is. A whole bcrypt hash is taken literally,
// and a value that starts like one but is not whole is refused: expanded,
// it would collapse into a short password.
func expandValue(s string, lookup func(string) (string, bool)) (string, error) {
	if bcryptHash.MatchString(s) {
		return s, nil
	}
	if looksLikeHash.MatchString(s) {
		return "", errors.New("starts like a bcrypt hash ($2a$...) but is not a whole one (60 characters); " +
			"write the hash whole, or escape each $ as $$")
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		rest := s[i+1:]
		switch {
		case rest[0] == '$':
			b.WriteByte('$')
			i++
		case rest[0] == '{':
			end := strings.IndexByte(rest, '}')
			if end < 0 {
				return "", errors.New("${ without a closing }")
			}
			name := rest[1:end]
			if varName.FindString(name) != name || name == "" {
				return "", errors.New("${...} holds no variable name (letters, digits and _); write $$ for a $")
			}
			v, _ := lookup(name)
			b.WriteString(v)
			i += end + 1
		default:
			name := varName.FindString(rest)
			if name == "" {
				b.WriteByte('$') // "$5", "a$": a plain $
				continue
			}
			v, _ := lookup(name)
			b.WriteString(v)
			i += len(name)
		}
	}
	return b.String(), nil
}

// unknownKeys checks the config file as written for keys that Config does
// not have, and returns an error naming each with its line, or nil. It
// decodes the file strictly into a scratch Config; the other errors that
// decoding finds (a "$VAR" where a bool goes) are for the decoding of the
// expanded values to report.
func unknownKeys(raw []byte) error {
	dec := yaml.NewDecoder(strings.NewReader(string(raw)))
	dec.KnownFields(true)
	scratch := defaultConfig()
	var te *yaml.TypeError
	if err := dec.Decode(&scratch); !errors.As(err, &te) {
		return nil // decoded, or a syntax error the real decode reports
	}
	var unknown []string
	for _, msg := range te.Errors {
		if strings.Contains(msg, " not found in type ") {
			unknown = append(unknown, msg)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	return &yaml.TypeError{Errors: unknown}
}
