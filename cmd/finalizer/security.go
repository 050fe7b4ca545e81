package main

import (
	"cmp"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/finalizer-dev/finalizer/internal/embeddednats"
	"github.com/finalizer-dev/finalizer/listener"
)

// Roles of the embedded NATS server's users (nats.embedded.users[].role).
const (
	// RolePublisher may publish listener events (<prefix>.>) and nothing
	// else: what a Spark driver needs.
	RolePublisher = "publisher"
	// RoleOperator may call the track/join API (<api_prefix>.>), publish
	// events (finalizer publish) and receive replies (_INBOX.>).
	RoleOperator = "operator"
	// RoleAdmin may do anything (nats CLI, monitoring of the stream).
	RoleAdmin = "admin"
)

// serviceUser is the login the service itself uses on its embedded server
// when users are configured; its password is random at every start and
// kept in memory only.
const serviceUser = "finalizer-service"

// isLoopback reports whether a listen address (host:port) accepts only
// connections from this machine. An empty host listens everywhere.
func isLoopback(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// checkExposure refuses listens that would expose the service without a
// credential: the HTTP API on a non-loopback address without a token, and
// the embedded NATS server on one without users (anyone could publish
// progress and move verdicts).
func (c Config) checkExposure() error {
	if l := c.HTTP.Listen; l != "" && l != "off" && !isLoopback(l) && c.HTTP.Token == "" && !c.HTTP.Insecure {
		return fmt.Errorf("http.listen %s is not a loopback address and no http.token is set: set a token (--http-token, "+
			"FINALIZER_HTTP_TOKEN) so that only its holders can read verdicts, runs and metrics, or pass --http-insecure to serve them to anyone who can connect", l)
	}
	// The embedded server reads an empty host as 127.0.0.1.
	natsLoopback := isLoopback(c.NATS.Listen) || strings.HasPrefix(c.NATS.Listen, ":")
	if c.NATS.URL == "" && !natsLoopback && len(c.NATS.Embedded.Users) == 0 && !c.NATS.Embedded.AllowAnonymous {
		return fmt.Errorf("nats.listen %s is not a loopback address and the embedded server has no users: anyone who can connect could publish "+
			"progress and move verdicts; configure nats.embedded.users (see SECURITY.md), or pass --nats-allow-anonymous", c.NATS.Listen)
	}
	return nil
}

// validate checks the nats.embedded section.
func (e EmbeddedNATSConfig) validate() error {
	for i, u := range e.Users {
		switch u.Role {
		case RolePublisher, RoleOperator, RoleAdmin:
		default:
			return fmt.Errorf("nats.embedded.users[%d]: role %q: want %s, %s or %s", i, u.Role, RolePublisher, RoleOperator, RoleAdmin)
		}
		switch {
		case u.NKey != "" && (u.User != "" || u.Password != ""):
			return fmt.Errorf("nats.embedded.users[%d]: set user and password, or nkey, not both", i)
		case u.NKey == "" && (u.User == "" || u.Password == ""):
			return fmt.Errorf("nats.embedded.users[%d]: set user and password, or nkey", i)
		case u.User == serviceUser:
			return fmt.Errorf("nats.embedded.users[%d]: the user name %s is the service's own", i, serviceUser)
		}
	}
	t := e.TLS
	if (t.CertFile == "") != (t.KeyFile == "") {
		return fmt.Errorf("nats.embedded.tls: set both cert_file and key_file")
	}
	if t.ClientCAFile != "" && t.CertFile == "" {
		return fmt.Errorf("nats.embedded.tls: client_ca_file needs cert_file and key_file")
	}
	return nil
}

// embeddedAuth returns the embedded server's users for cfg, with the
// service's own login (a random password) first, and that login. It
// returns no users when none are configured.
func embeddedAuth(cfg Config) (users []embeddednats.User, user, password string, err error) {
	if len(cfg.NATS.Embedded.Users) == 0 {
		return nil, "", "", nil
	}
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return nil, "", "", fmt.Errorf("service password: %w", err)
	}
	password = hex.EncodeToString(b)
	users = append(users, embeddednats.User{Name: serviceUser, Password: password})
	for _, u := range cfg.NATS.Embedded.Users {
		users = append(users, embeddednats.User{Name: u.User, Password: u.Password, NKey: u.NKey,
			Permissions: rolePermissions(u.Role, cfg.Prefix, cfg.NATS.APIPrefix, cmp.Or(cfg.Stream.Name, listener.DefaultStream))})
	}
	return users, serviceUser, password, nil
}

// rolePermissions returns the subjects a role may use; stream is the
// event stream's name.
func rolePermissions(role, prefix, apiPrefix, stream string) *embeddednats.Permissions {
	switch role {
	case RolePublisher:
		return &embeddednats.Permissions{Publish: []string{prefix + ".>"}}
	case RoleOperator:
		return &embeddednats.Permissions{
			// $JS.API.STREAM.NAMES lets `finalizer publish` find the stream
			// and publish with acknowledgements; the stream's info lets
			// `finalizer rewind` read its last sequence after the rewind
			// (ADR 0019, addendum of 2026-12-06, "judged by sequence").
			Publish:   []string{apiPrefix + ".>", prefix + ".>", "$JS.API.STREAM.NAMES", "$JS.API.STREAM.INFO." + stream},
			Subscribe: []string{"_INBOX.>"},
		}
	default:
		return nil
	}
}

// embeddedTLS returns the embedded server's TLS settings, nil without.
func embeddedTLS(t EmbeddedTLSConfig) *embeddednats.TLS {
	if t.CertFile == "" {
		return nil
	}
	return &embeddednats.TLS{CertFile: t.CertFile, KeyFile: t.KeyFile, ClientCAFile: t.ClientCAFile}
}

// requireToken wraps h so that every request but the probes (/healthz,
// /readyz) must carry "Authorization: Bearer <token>". The comparison is
// in constant time (of SHA-256 digests, so the token's length does not
// leak either). An empty token requires nothing.
func requireToken(token string, h http.Handler) http.Handler {
	if token == "" {
		return h
	}
	want := sha256.Sum256([]byte(token))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" || r.URL.Path == "/readyz" {
			h.ServeHTTP(w, r)
			return
		}
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		sum := sha256.Sum256([]byte(strings.TrimSpace(got)))
		if !ok || subtle.ConstantTimeCompare(sum[:], want[:]) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="finalizer"`)
			// A client without the token gets no kept-alive connection to
			// hold open.
			w.Header().Set("Connection", "close")
			writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "this endpoint needs Authorization: Bearer <http.token>"})
			return
		}
		h.ServeHTTP(w, r)
	})
}
