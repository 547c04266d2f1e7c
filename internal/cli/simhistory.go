package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/harbinger-mq/harbinger/client"
	"github.com/harbinger-mq/harbinger/internal/history"
	"github.com/harbinger-mq/harbinger/internal/sim"
)

// HistoryBrokerPrefix starts a --history that reads straight from a
// running broker: broker:ADDR/QUEUE.
const HistoryBrokerPrefix = "broker:"

// maxKeyRows bounds the keys the text report lists (the busiest); --json
// has them all.
const maxKeyRows = 40

// loadHistory reads a history file, or exports one from a running broker
// for spec broker:ADDR/QUEUE (the last window of it when window > 0).
func loadHistory(ctx context.Context, spec string, window time.Duration) (history.Header, []history.Entry, error) {
	var r io.Reader
	if rest, ok := strings.CutPrefix(spec, HistoryBrokerPrefix); ok {
		addr, queue, ok := strings.Cut(rest, "/")
		if !ok || addr == "" || queue == "" {
			return history.Header{}, nil, fmt.Errorf("--history: want %sADDR/QUEUE, got %q", HistoryBrokerPrefix, spec)
		}
		var opts []client.Option
		if tok := os.Getenv("HARBINGER_TOKEN"); tok != "" {
			opts = append(opts, client.WithToken(tok))
		}
		c, err := client.Dial(ctx, addr, opts...)
		if err != nil {
			return history.Header{}, nil, err
		}
		defer c.Close()
		var buf bytes.Buffer
		if _, err := c.ExportHistory(ctx, queue, window, &buf); err != nil {
			return history.Header{}, nil, fmt.Errorf("--history: exporting %q from %s: %w", queue, addr, err)
		}
		r = &buf
	} else {
		if window > 0 {
			return history.Header{}, nil, fmt.Errorf("--history-window applies to %sADDR/QUEUE only; a file holds the window it was exported with", HistoryBrokerPrefix)
		}
		f, err := os.Open(spec)
		if err != nil {
			return history.Header{}, nil, err
		}
		defer f.Close()
		r = f
	}
	h, es, err := history.Decode(r)
	if err != nil {
		return h, nil, fmt.Errorf("--history %s: %w", spec, err)
	}
	return h, es, nil
}

// runSimHistory is sim --history: the replay of a queue's own history.
func runSimHistory(ctx context.Context, spec string, window time.Duration, armSpec string, armsGiven bool, workers int, loads []float64, overhead time.Duration, overheadGiven bool, asJSON bool, stdout io.Writer) error {
	h, es, err := loadHistory(ctx, spec, window)
	if err != nil {
		return err
	}
	src, err := sim.FromHistory(h, es)
	if err != nil {
		return err
	}
	var arms []sim.Arm
	if armsGiven {
		if arms, err = parseArms(armSpec, src); err != nil {
			return err
		}
		arms = slices.DeleteFunc(arms, func(a sim.Arm) bool { return a.Name == "fifo" }) // always the baseline
	}
	o := sim.ReplayOptions{Workers: workers, Overhead: overhead}
	if !overheadGiven {
		o.Overhead = sim.InferOverhead(es)
	}
	o.Loads = loads
	begin := time.Now()
	res, err := sim.Replay(src, arms, o)
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	writeReplay(stdout, res, workers > 0, !overheadGiven)
	fmt.Fprintf(stdout, "\n(ran in %.1f s)\n", time.Since(begin).Seconds())
	return nil
}

// writeReplay prints a replay in a user's terms, then its tables.
func writeReplay(w io.Writer, r *sim.ReplayResult, workersGiven, overheadInferred bool) {
	how := func(given bool) string {
		if given {
			return "given"
		}
		return "inferred from the record"
	}
	fmt.Fprintf(w, "history of queue %q: %d settled deliveries of %d keys, %s to %s, recorded under %s\n",
		r.Queue, r.Jobs, r.Keys, r.Since.Format(time.RFC3339), r.Until.Format(time.RFC3339), r.Policy)
	fmt.Fprintf(w, "replayed with %d workers (%s) and %.2f ms a job outside its handler (%s)\n", r.Workers, how(workersGiven), float64(r.Overhead), how(!overheadInferred))
	if r.TooLittle != "" {
		fmt.Fprintf(w, "\nnot enough to go on: %s\n", r.TooLittle)
		if len(r.Loads) == 0 {
			return
		}
	}
	for _, l := range r.Loads {
		what := "at a scaled"
		if l.Recorded {
			what = "at the recorded"
		}
		fmt.Fprintf(w, "\n%s offered load, %.2f:\n", what, l.Load)
		if len(l.Arms) == 0 {
			continue
		}
		def := l.Arms[0].Arm
		keys := slices.Clone(l.Keys)
		slices.SortStableFunc(keys, func(a, b sim.ReplayKey) int { return b.Jobs - a.Jobs })
		shown := keys[:min(len(keys), maxKeyRows)]
		fmt.Fprintf(w, "  under %s, against FIFO:\n", def)
		for _, k := range shown {
			fmt.Fprintf(w, "    %s\n", k.Words(def))
		}
		if len(keys) > len(shown) {
			fmt.Fprintf(w, "    (%d more keys, the least busy: --json has them all)\n", len(keys)-len(shown))
		}
		fmt.Fprintf(w, "\n  %-28s %7s %9s %9s  %8s %8s %6s %6s %6s  %9s", "key", "jobs", "FIFO mean", "FIFO P99", "mean", "P99", "later", ">1.1x", "worst", "oracle")
		if l.FidelityArm != "" {
			fmt.Fprintf(w, "  %9s %9s", "live mean", "live P99")
		}
		fmt.Fprintln(w)
		for _, k := range shown {
			if k.TooFew {
				fmt.Fprintf(w, "  %-28s %7d  too few to say\n", clip(k.Key, 28), k.Jobs)
				continue
			}
			a := k.Arms[0]
			oracle := "-"
			if k.Oracle != nil {
				oracle = signed(-float64(k.Oracle.MeanCut))
			}
			fmt.Fprintf(w, "  %-28s %7d %9s %9s  %8s %8s %6s %6s %6s  %9s", clip(k.Key, 28), k.Jobs, secs(float64(k.FIFOMeanS)), secs(float64(k.FIFOP99S)),
				signed(-float64(a.MeanCut)), signed(float64(a.P99Ratio)-1), pct(float64(a.Later)), pct(float64(a.Over110)), ratio(float64(a.Worst)), oracle)
			if l.FidelityArm != "" {
				fmt.Fprintf(w, "  %9s %9s", secs(float64(k.LiveMeanS)), secs(float64(k.LiveP99S)))
			}
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "  (mean and P99 under %s against FIFO's; later: share of the key's jobs done later than under FIFO; >1.1x: later than 1.10x; oracle: the key oracle's mean (%s))\n", def, l.RArm)
		if l.FidelityArm != "" {
			me, pe := fidelity(l)
			fmt.Fprintf(w, "  the replay of the recorded policy (%s) against the live latencies: mean within %s, P99 within %s on every key with %d jobs or more\n",
				l.FidelityArm, pct(me), pct(pe), sim.ReplayMinKeyJobs)
		}
		fmt.Fprintf(w, "\n  every job, against FIFO (the policy's goal):\n")
		fmt.Fprintf(w, "  %-44s %9s %7s %7s %8s  %s\n", "arm", "long>1.1x", "worst", "P99", "mean cut", "T1 T2 M")
		for _, ps := range [][]sim.Paired{l.Arms, l.Family} {
			for _, p := range ps {
				fmt.Fprintf(w, "  %-44s %9s %7s %7s %8s  %s %s %s\n", clip(p.Arm, 44), pct(float64(p.LongOverRatio)), ratio(float64(p.LongWorst)),
					ratio(float64(p.P99Ratio)), pct(float64(p.MeanCut)), yesNo(p.T1), yesNo(p.T2), yesNo(p.M))
			}
		}
	}
	fmt.Fprintf(w, "\nmethod: %s\n", r.Method)
}

// fidelity is the largest relative error of the replayed recorded policy
// against the live latencies over the reported keys: of the mean, of the
// P99.
func fidelity(l sim.ReplayLoad) (meanErr, p99Err float64) {
	for _, k := range l.Keys {
		if k.TooFew {
			continue
		}
		m, p := float64(k.FIFOMeanS), float64(k.FIFOP99S)
		for _, a := range k.Arms {
			if a.Arm == l.FidelityArm {
				m, p = float64(a.MeanS), float64(a.P99S)
			}
		}
		meanErr = max(meanErr, math.Abs(m/float64(k.LiveMeanS)-1))
		p99Err = max(p99Err, math.Abs(p/float64(k.LiveP99S)-1))
	}
	return meanErr, p99Err
}

func yesNo(b bool) string {
	if b {
		return "ok"
	}
	return "--"
}

func signed(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf("%+.1f%%", v*100)
}

func secs(s float64) string {
	switch {
	case math.IsNaN(s):
		return "-"
	case s < 1:
		return fmt.Sprintf("%.1fms", s*1000)
	}
	return fmt.Sprintf("%.2fs", s)
}

// clip cuts s to n runes for a table column.
func clip(s string, n int) string {
	if s == "" {
		return "(none)"
	}
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
