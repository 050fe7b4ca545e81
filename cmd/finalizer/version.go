package main

import (
	"fmt"
	"io"
	"runtime/debug"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/finalizer-dev/finalizer/control"
)

// buildVersion describes the binary: its module version, the commit it was
// built from (with "-dirty" when the work tree had changes), the Go version
// and the control-table schema version it migrates to and expects.
type buildVersion struct {
	Version   string
	Commit    string
	Time      string
	GoVersion string
	Schema    int
}

// readBuildVersion reads the version from the build information the Go
// toolchain embeds: `go build` in a git checkout records the commit
// (vcs.revision); `go run` and test binaries do not.
func readBuildVersion() buildVersion {
	v := buildVersion{Version: "(devel)", Commit: "unknown", Schema: control.SchemaVersion}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	v.GoVersion = bi.GoVersion
	if bi.Main.Version != "" {
		v.Version = bi.Main.Version
	}
	dirty := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Commit = s.Value
		case "vcs.time":
			v.Time = s.Value
		case "vcs.modified":
			dirty, _ = strconv.ParseBool(s.Value)
		}
	}
	if dirty && v.Commit != "unknown" {
		v.Commit += "-dirty"
	}
	return v
}

// String is the one line `finalizer --version` prints.
func (v buildVersion) String() string {
	return fmt.Sprintf("%s (commit %s, %s, control-table schema %d)", v.Version, v.Commit, v.GoVersion, v.Schema)
}

// unknownCommitWhy says why a binary does not know its commit, so that
// "unknown" is not a riddle: the Go toolchain records it only in a build
// with version control stamping.
const unknownCommitWhy = " (not recorded: go run, a test binary, or a build with -buildvcs=false, as GOFLAGS may set; `go build -buildvcs=true` records it)"

func newVersionCmd(stdout io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit, Go version and control-table schema version",
		Long: `Prints the binary's version, the commit it was built from (with -dirty when the work
tree had uncommitted changes; "unknown" under go run), the Go version, and the version of
the control-table schema it creates and expects. A binary refuses a control table migrated
by a newer schema version.

Exit codes: 0.`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			v := readBuildVersion()
			commit := v.Commit
			if commit == "unknown" {
				commit += unknownCommitWhy
			}
			fmt.Fprintf(stdout, "finalizer %s\ncommit:          %s\n", v.Version, commit)
			if v.Time != "" {
				fmt.Fprintf(stdout, "commit time:     %s\n", v.Time)
			}
			fmt.Fprintf(stdout, "go:              %s\ncontrol schema:  %d\n", v.GoVersion, v.Schema)
			return nil
		},
	}
}
