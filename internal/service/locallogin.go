package service

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/finalizer-dev/finalizer/internal/embeddednats"
)

// NATSLoginFile is where the service keeps the login of its embedded NATS
// server for the machine's owner, in the data dir (mode 0600): the URL,
// the user and the password. `finalizer track`, `join` and `publish` read
// it when they talk to that server without credentials of their own.
const NATSLoginFile = "nats-login.json"

// LocalLoginUser is the user name of the owner's login.
const LocalLoginUser = "finalizer-local"

// LocalLogin is the owner's login of the embedded NATS server.
type LocalLogin struct {
	URL      string `json:"url"`
	User     string `json:"user"`
	Password string `json:"password"`
}

// ReadLocalLogin reads the login file of a data dir.
func ReadLocalLogin(dataDir string) (LocalLogin, error) {
	var l LocalLogin
	raw, err := os.ReadFile(filepath.Join(dataDir, NATSLoginFile))
	if err != nil {
		return l, err
	}
	if err := json.Unmarshal(raw, &l); err != nil {
		return l, fmt.Errorf("%s: %w", NATSLoginFile, err)
	}
	if l.User == "" || l.Password == "" {
		return l, fmt.Errorf("%s: no user or password", NATSLoginFile)
	}
	return l, nil
}

// localLogin returns the owner's login for the embedded server of dataDir:
// the password kept in its login file (so publishers configured with it
// keep working across restarts), or a new random one.
func localLogin(dataDir string) (embeddednats.User, error) {
	if l, err := ReadLocalLogin(dataDir); err == nil && l.User == LocalLoginUser {
		return embeddednats.User{Name: l.User, Password: l.Password}, nil
	}
	pw, err := randomPassword()
	return embeddednats.User{Name: LocalLoginUser, Password: pw}, err
}

// randomPassword returns 24 random bytes in hex.
func randomPassword() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("nats login: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// writeLocalLogin writes the login file, readable by the owner only: a new
// file replaces the old one, so a file another user could read (made by
// hand, or copied) never keeps the password.
func writeLocalLogin(dataDir, url string, u embeddednats.User) (string, error) {
	path := filepath.Join(dataDir, NATSLoginFile)
	raw, err := json.MarshalIndent(LocalLogin{URL: url, User: u.Name, Password: u.Password}, "", "  ")
	if err != nil {
		return "", err
	}
	tmp := path + ".tmp"
	_ = os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", fmt.Errorf("write %s: %w", NATSLoginFile, err)
	}
	_, err = f.Write(append(raw, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return "", errors.Join(fmt.Errorf("write %s", NATSLoginFile), err)
	}
	return path, nil
}
