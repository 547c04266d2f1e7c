// Package cli owns harbinger-lab's command line: the benchmarks against
// peer brokers (bench flow, bench cost and the hidden bare servers they
// start) and the simulator's ablation studies (experiments). Each
// subcommand keeps the flags it had as a subcommand of harbinger.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	iofs "io/fs"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/harbinger-mq/harbinger/internal/report"
	"github.com/harbinger-mq/harbinger/internal/workload"
	"github.com/harbinger-mq/harbinger/workloads"
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
		fmt.Fprintf(stderr, "harbinger-lab: unknown command %q\n\n", args[0])
		usage(stderr)
		return 2
	}
	if err := c.run(ctx, args[1:], stdout, stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		if !errors.Is(err, errUsage) {
			fmt.Fprintf(stderr, "harbinger-lab %s: %v\n", args[0], err)
		}
		return 1
	}
	return 0
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "harbinger-lab: Harbinger's benchmarks against peer brokers and its simulator experiments.")
	fmt.Fprintln(w, "\nUsage: harbinger-lab <command> [flags]   (harbinger-lab <command> -h for its flags)\n\nCommands:")
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
		fmt.Fprintf(stderr, "Usage: harbinger-lab %s\n\nFlags:\n", synopsis)
		fs.PrintDefaults()
	}
	return fs
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

// DefaultWorkload is the pre-registered workload shipped with the
// repository, named from lab/, where harbinger-lab runs; the binary
// carries a copy (package workloads), used when the file is not found from
// the working directory.
const DefaultWorkload = "../workloads/production-flow.yaml"

// loadWorkload reads the workload file at path; the default one falls back
// to the binary's embedded copy.
func loadWorkload(path string) (*workload.Workload, error) {
	w, err := workload.Load(path)
	if err == nil || path != DefaultWorkload || !errors.Is(err, iofs.ErrNotExist) {
		return w, err
	}
	data, rerr := workloads.FS.ReadFile(filepath.Base(DefaultWorkload))
	if rerr != nil {
		return nil, err
	}
	return workload.Parse(data)
}

func parseSeeds(s string) ([]uint64, error) {
	if s == "" {
		return nil, nil
	}
	var out []uint64
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.ParseUint(strings.TrimSpace(f), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("--seeds: %q is not a non-negative whole number", f)
		}
		out = append(out, v)
	}
	return out, nil
}

// writeReport prints rep as harbinger sim does: tables, or one JSON object.
func writeReport(w io.Writer, rep *report.Report, asJSON bool, took time.Duration) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	if err := report.WriteText(w, rep); err != nil {
		return err
	}
	fmt.Fprintf(w, "\n(ran in %.1f s)\n", took.Seconds())
	return nil
}
