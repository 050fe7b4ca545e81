// Package pgcluster runs the managed private PostgreSQL cluster that
// finalizer serve uses when no --postgres-url is given (docs/contract.md §7), and
// that tests start through pgcluster/pgtest.
//
// The cluster lives in one directory: the data directory, a generated
// password (0600), the port chosen on first start, the server log and the
// server's unix socket. It is initialised with initdb from the local
// installation on first start, listens on 127.0.0.1 only, uses scram
// authentication, and is started and stopped with pg_ctl. When the process
// runs as root, initdb, pg_ctl and the server run as the postgres OS user.
//
// The package uses the installation's own programs (initdb, pg_ctl, psql);
// it does not import a database driver.
package pgcluster
