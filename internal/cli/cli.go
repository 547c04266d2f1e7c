// Package cli owns Harbinger's command line: one function per subcommand,
// each turning flags into a component's Config and running it.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
)

type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

var commands = map[string]command{}

func register(name, summary string, run func(ctx context.Context, args []string, stdout, stderr io.Writer) error) {
	commands[name] = command{summary: summary, run: run}
}

// errUsage marks an error already explained by the flag package.
var errUsage = errors.New("usage")

// Main runs the subcommand named by args[0] and returns the process exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(stdout)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "harbinger: unknown command %q\n\n", args[0])
		usage(stderr)
		return 2
	}
	if err := c.run(ctx, args[1:], stdout, stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		if !errors.Is(err, errUsage) {
			fmt.Fprintf(stderr, "harbinger %s: %v\n", args[0], err)
		}
		return 1
	}
	return 0
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "Harbinger: a job broker that learns how long each kind of job takes and runs short work first.")
	fmt.Fprintln(w, "\nUsage: harbinger <command> [flags]   (harbinger <command> -h for its flags)\n\nCommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-12s %s\n", n, commands[n].summary)
	}
}

// newFlags returns a FlagSet that reports errors instead of exiting.
func newFlags(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: harbinger %s\n\nFlags:\n", synopsis)
		printFlags(fs, stderr)
	}
	return fs
}

// oldNamePrefix starts the usage of a flag kept only as an old name of
// another: it still works, but -h lists it in one line at the end.
const oldNamePrefix = "old name of "

// printFlags is flag.PrintDefaults without the flags kept as old names,
// which it names at the end instead.
func printFlags(fs *flag.FlagSet, w io.Writer) {
	var old []string
	fs.VisitAll(func(f *flag.Flag) {
		if strings.HasPrefix(f.Usage, oldNamePrefix) {
			old = append(old, "-"+f.Name+" ("+strings.TrimPrefix(f.Usage, oldNamePrefix)+")")
			return
		}
		name, usage := flag.UnquoteUsage(f)
		line := "  -" + f.Name
		if name != "" {
			line += " " + name
		}
		if len(line) <= 4 { // a one-letter bool flag fits on its line
			line += "\t"
		} else {
			line += "\n    \t"
		}
		line += strings.ReplaceAll(usage, "\n", "\n    \t")
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "0s" {
			if name == "string" {
				line += fmt.Sprintf(" (default %q)", f.DefValue)
			} else {
				line += fmt.Sprintf(" (default %v)", f.DefValue)
			}
		}
		fmt.Fprintln(w, line)
	})
	if len(old) > 0 {
		fmt.Fprintf(w, "\nOld flag names, still accepted: %s\n", strings.Join(old, ", "))
	}
}

func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return errUsage
	}
	return nil
}
