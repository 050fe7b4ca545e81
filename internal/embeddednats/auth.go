package embeddednats

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"golang.org/x/crypto/bcrypt"

	"github.com/nats-io/nats-server/v2/server"
)

// DefaultTLSTimeout bounds a client's TLS handshake, in seconds.
const DefaultTLSTimeout = 2.0

// ErrBadAuth is returned by Start when Options.Users or Options.TLS cannot
// be used: a user without a name and password or an NKey, a name used
// twice, a TLS block without a certificate and key.
var ErrBadAuth = errors.New("embedded nats: bad authentication settings")

// User is one login of the embedded server. It logs in with a name and
// password, or with an NKey (the client signs a nonce with the seed whose
// public key is NKey).
type User struct {
	// Name and Password log in with a user name. Password may be a bcrypt
	// hash ($2a$...), which nats-server checks as such.
	Name, Password string
	// NKey is the public key (U...) of an NKey login; Name and Password are
	// then empty.
	NKey string
	// Permissions are the subjects the user may use; nil allows everything.
	Permissions *Permissions
}

// Permissions says what subjects a user may publish to and subscribe to,
// with NATS wildcards (* and >). Anything not allowed is denied: an empty
// list allows nothing.
type Permissions struct {
	Publish   []string
	Subscribe []string
}

// TLS makes the server require TLS from every client.
type TLS struct {
	// CertFile and KeyFile are the server's certificate (chain) and key,
	// PEM. Both are required. Clients verify the certificate against the
	// host they connect to.
	CertFile, KeyFile string
	// ClientCAFile, when set, makes the server require a client
	// certificate signed by one of the CAs in this PEM file (mutual TLS).
	ClientCAFile string
}

// bcryptHash is what nats-server takes for a bcrypt hash (its
// validBcryptPrefix).
var bcryptHash = regexp.MustCompile(`^\$2[abxy]\$\d{2}\$.*`)

// serverPassword returns what the server keeps of a user's password: a
// bcrypt hash, so that the server's memory holds no plaintext password and
// it does not warn "Plaintext passwords detected" at every start. A hash
// given as the password is kept as it is. The cost is bcrypt's least: the
// hash is never stored and the service's own passwords are random (128
// bits), so a higher cost would only slow every login (about 1 ms at the
// least cost against 50-100 ms at the default). A password bcrypt cannot
// take (over 72 bytes) stays plaintext; the server then warns.
func serverPassword(pw string) string {
	if bcryptHash.MatchString(pw) {
		return pw
	}
	h, err := bcrypt.GenerateFromPassword([]byte(pw), bcrypt.MinCost)
	if err != nil {
		return pw
	}
	return string(h)
}

// applyAuth sets o's users and TLS on opts.
func applyAuth(o Options, opts *server.Options) error {
	seen := map[string]bool{}
	for i, u := range o.Users {
		switch {
		case u.NKey != "" && (u.Name != "" || u.Password != ""):
			return fmt.Errorf("%w: user %d has both an nkey and a name or password", ErrBadAuth, i)
		case u.NKey != "":
			if !strings.HasPrefix(u.NKey, "U") {
				return fmt.Errorf("%w: user %d: nkey %q is not a user public key (U...)", ErrBadAuth, i, u.NKey)
			}
			if seen[u.NKey] {
				return fmt.Errorf("%w: nkey %s is listed twice", ErrBadAuth, u.NKey)
			}
			seen[u.NKey] = true
			opts.Nkeys = append(opts.Nkeys, &server.NkeyUser{Nkey: u.NKey, Permissions: u.Permissions.server()})
		case u.Name == "" || u.Password == "":
			return fmt.Errorf("%w: user %d (%q) needs a name and a password, or an nkey", ErrBadAuth, i, u.Name)
		default:
			if seen[u.Name] {
				return fmt.Errorf("%w: user %q is listed twice", ErrBadAuth, u.Name)
			}
			seen[u.Name] = true
			opts.Users = append(opts.Users, &server.User{Username: u.Name, Password: serverPassword(u.Password), Permissions: u.Permissions.server()})
		}
	}
	if o.TLS == nil {
		return nil
	}
	if o.TLS.CertFile == "" || o.TLS.KeyFile == "" {
		return fmt.Errorf("%w: tls needs a cert file and a key file", ErrBadAuth)
	}
	tc, err := server.GenTLSConfig(&server.TLSConfigOpts{
		CertFile: o.TLS.CertFile, KeyFile: o.TLS.KeyFile,
		CaFile: o.TLS.ClientCAFile, Verify: o.TLS.ClientCAFile != "",
	})
	if err != nil {
		return fmt.Errorf("embedded nats: tls: %w", err)
	}
	opts.TLS, opts.TLSConfig, opts.TLSVerify, opts.TLSTimeout = true, tc, o.TLS.ClientCAFile != "", DefaultTLSTimeout
	return nil
}

// server returns nats-server's permissions for p: nil for nil, and a deny
// of everything for an empty list (nats-server reads an empty allow list
// as "no restriction").
func (p *Permissions) server() *server.Permissions {
	if p == nil {
		return nil
	}
	side := func(allow []string) *server.SubjectPermission {
		if len(allow) == 0 {
			return &server.SubjectPermission{Deny: []string{">"}}
		}
		return &server.SubjectPermission{Allow: append([]string(nil), allow...)}
	}
	return &server.Permissions{Publish: side(p.Publish), Subscribe: side(p.Subscribe)}
}
