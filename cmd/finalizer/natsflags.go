package main

import (
	"github.com/spf13/pflag"

	"github.com/finalizer-dev/finalizer/listener"
)

// addNATSAuthFlags adds the NATS client authentication and TLS flags.
// Secrets are best passed as FINALIZER_NATS_PASSWORD / FINALIZER_NATS_TOKEN
// or as files; they are never logged.
func addNATSAuthFlags(fs *pflag.FlagSet) {
	fs.String("nats-user", "", "NATS user name")
	fs.String("nats-password", "", "NATS password (prefer FINALIZER_NATS_PASSWORD)")
	fs.String("nats-token", "", "NATS token (prefer FINALIZER_NATS_TOKEN)")
	fs.String("nats-nkey-seed", "", "file holding an NKey seed")
	fs.String("nats-creds", "", "NATS credentials file (JWT and seed)")
	fs.String("nats-tls-ca", "", "CA certificate file to verify the NATS server")
	fs.String("nats-tls-cert", "", "client certificate file for NATS TLS")
	fs.String("nats-tls-key", "", "client key file for NATS TLS")
}

// addAPIPrefixFlag adds --api-prefix, for the commands that serve or call
// the track/join API.
func addAPIPrefixFlag(fs *pflag.FlagSet) {
	fs.String("api-prefix", "", `subject prefix of the track/join API (default "`+listener.DefaultAPIPrefix+`")`)
}

// applyNATSAuthFlags copies the flags that are set over c.
func applyNATSAuthFlags(fs *pflag.FlagSet, c *NATSConfig) {
	for name, dst := range map[string]*string{
		"nats-user": &c.User, "nats-password": &c.Password, "nats-token": &c.Token,
		"nats-nkey-seed": &c.NKeySeed, "nats-creds": &c.Creds,
		"nats-tls-ca": &c.TLSCA, "nats-tls-cert": &c.TLSCert, "nats-tls-key": &c.TLSKey,
		"api-prefix": &c.APIPrefix,
	} {
		if f := fs.Lookup(name); f != nil && f.Changed {
			*dst = f.Value.String()
		}
	}
}
