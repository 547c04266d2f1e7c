package cli

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

func init() {
	register("version", "print the version, commit and Go version this binary was built from", runVersion)
}

func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("version", "version", stderr)
	if err := parse(fs, args); err != nil {
		return err
	}
	fmt.Fprintln(stdout, versionString())
	return nil
}

// versionString says which build this is: the module version (set by go
// install ...@version), else the commit the binary was built from.
func versionString() string {
	v, rev, dirty, at := "(devel)", "", false, ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			case "vcs.time":
				at = s.Value
			}
		}
	}
	out := "harbinger " + v
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		out += " commit " + rev
		if dirty {
			out += "+modified"
		}
		if at != "" {
			out += " (" + at + ")"
		}
	}
	return out + " " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH
}
