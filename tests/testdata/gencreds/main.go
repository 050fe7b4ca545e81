// Command gencreds writes the NATS operator-mode fixtures of the security
// tests into tests/testdata: an operator, a system account and an account
// with JetStream (JWTs), and a user's credentials file. They are test
// fixtures, not secrets. Run from the repository root:
//
//	go run ./tests/testdata/gencreds
package main

import (
	"log"
	"os"
	"path/filepath"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
)

func main() {
	dir := filepath.Join("tests", "testdata")
	op, _ := nkeys.CreateOperator()
	opPub, _ := op.PublicKey()
	oc := jwt.NewOperatorClaims(opPub)
	oc.Name = "finalizer-test-operator"

	sys, _ := nkeys.CreateAccount()
	sysPub, _ := sys.PublicKey()
	oc.SystemAccount = sysPub
	opJWT, err := oc.Encode(op)
	check(err)
	sc := jwt.NewAccountClaims(sysPub)
	sc.Name = "SYS"
	sysJWT, err := sc.Encode(op)
	check(err)

	acc, _ := nkeys.CreateAccount()
	accPub, _ := acc.PublicKey()
	ac := jwt.NewAccountClaims(accPub)
	ac.Name = "FINALIZER"
	ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
	accJWT, err := ac.Encode(op)
	check(err)

	user, _ := nkeys.CreateUser()
	userPub, _ := user.PublicKey()
	seed, _ := user.Seed()
	uc := jwt.NewUserClaims(userPub)
	uc.Name = "finalizer-test-user"
	uc.IssuerAccount = accPub
	userJWT, err := uc.Encode(acc)
	check(err)
	creds, err := jwt.FormatUserConfig(userJWT, seed)
	check(err)

	for name, data := range map[string]string{
		"operator.jwt":    opJWT,
		"sys_account.jwt": sysJWT,
		"account.jwt":     accJWT,
		"user.creds":      string(creds),
	} {
		check(os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644))
	}
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
