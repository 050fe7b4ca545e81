// Package redact hides the secrets that URLs carry (a password or token in
// the user info, a password in the query) before a URL, or an error that
// may quote one, reaches a log line, a banner or a command's output.
package redact

import (
	"net/url"
	"regexp"
	"strings"
)

// Mask replaces every secret.
const Mask = "xxxxx"

// secretParam matches query parameters that hold a secret.
var secretParam = regexp.MustCompile(`(?i)pass|token|secret|key|auth|cred`)

// URLs returns a URL, or a comma-separated list of URLs, with every
// secret masked: the password of the user info (a user name alone, which
// NATS reads as a token, is masked whole), and the values of query
// parameters named like a password, token, secret or key. A part that does
// not parse as a URL still has everything before its last "@" masked and
// its query dropped, so a malformed URL never shows its secret either.
func URLs(list string) string {
	parts := strings.Split(list, ",")
	for i, p := range parts {
		parts[i] = one(p)
	}
	return strings.Join(parts, ",")
}

func one(raw string) string {
	p := strings.TrimSpace(raw)
	if p == "" {
		return raw
	}
	if u, err := url.Parse(p); err == nil && u.Scheme != "" && u.Opaque == "" && (u.Host != "" || u.User == nil) {
		if u.User != nil {
			if _, ok := u.User.Password(); ok {
				u.User = url.UserPassword(u.User.Username(), Mask)
			} else {
				u.User = url.User(Mask)
			}
		}
		if u.RawQuery != "" {
			q := u.Query()
			for k := range q {
				if secretParam.MatchString(k) {
					q[k] = []string{Mask}
				}
			}
			u.RawQuery = q.Encode()
		}
		return u.String()
	}
	// Not a URL we can take apart: mask by the text.
	rest, scheme := p, ""
	if i := strings.Index(p, "://"); i >= 0 {
		scheme, rest = p[:i+3], p[i+3:]
	}
	if i := strings.IndexAny(rest, "?#"); i >= 0 {
		rest = rest[:i] + "?" + Mask
	}
	if i := strings.LastIndex(rest, "@"); i >= 0 {
		rest = Mask + rest[i:]
	}
	if strings.ContainsAny(rest, " =") {
		// A keyword/value string (host=... password=...) or worse.
		return Mask
	}
	return scheme + rest
}

// Error returns err with every occurrence of each raw URL list, of its
// parts and of their user info replaced by its redacted form, or err
// itself when its text holds none of them. The result unwraps to err, so
// errors.Is still sees through it; only its text changes.
func Error(err error, raws ...string) error {
	if err == nil {
		return nil
	}
	msg := String(err.Error(), raws...)
	if msg == err.Error() {
		return err
	}
	return &redacted{msg: msg, err: err}
}

// String is Error for a message.
func String(msg string, raws ...string) string {
	for _, raw := range raws {
		if raw == "" {
			continue
		}
		msg = strings.ReplaceAll(msg, raw, URLs(raw))
		for _, p := range strings.Split(raw, ",") {
			p = strings.TrimSpace(p)
			if p == "" {
				continue
			}
			msg = strings.ReplaceAll(msg, p, one(p))
			for _, s := range secrets(p) {
				msg = strings.ReplaceAll(msg, s, Mask)
			}
		}
	}
	return msg
}

// secrets returns the secret parts of one raw URL as they may be quoted:
// its user info (with and without percent-decoding) and its password.
func secrets(p string) []string {
	rest := p
	if i := strings.Index(p, "://"); i >= 0 {
		rest = p[i+3:]
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return nil
	}
	info := rest[:at]
	out := []string{info}
	if dec, err := url.PathUnescape(info); err == nil && dec != info {
		out = append(out, dec)
	}
	if i := strings.Index(info, ":"); i >= 0 && i+1 < len(info) {
		out = append(out, info[i+1:])
	}
	var keep []string
	for _, s := range out {
		if len(s) >= 3 { // never mask "a" everywhere
			keep = append(keep, s)
		}
	}
	return keep
}

type redacted struct {
	msg string
	err error
}

func (r *redacted) Error() string { return r.msg }
func (r *redacted) Unwrap() error { return r.err }
