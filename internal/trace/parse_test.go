package trace

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Every malformed cell, row or header is reported with its file, row and
// column, so the person holding the file can find it.
func TestLoadCellErrors(t *testing.T) {
	t.Parallel()
	const (
		inv = "x_inv.csv"
		run = "x_run.csv"
	)
	tests := []struct {
		name   string
		mutate func(t *testing.T, inv, run sheet) (sheet, sheet)
		file   string
		row    int
		column string
		msg    string
	}{
		{"missing minute column", func(t *testing.T, i, r sheet) (sheet, sheet) {
			i.set(t, 1, "minute_5", "minute_five")
			return i, r
		}, inv, 1, "minute_5", "missing column"},
		{"missing hash column", func(t *testing.T, i, r sheet) (sheet, sheet) {
			i.set(t, 1, colOwner, "Owner")
			return i, r
		}, inv, 1, colOwner, "missing column"},
		{"missing percentile column", func(t *testing.T, i, r sheet) (sheet, sheet) {
			r.set(t, 1, "percentile_Average_50", "p50")
			return i, r
		}, run, 1, "percentile_Average_50", "missing column"},
		{"missing count column", func(t *testing.T, i, r sheet) (sheet, sheet) {
			r.set(t, 1, colCount, "N")
			return i, r
		}, run, 1, colCount, "missing column"},
		{"column twice", func(t *testing.T, i, r sheet) (sheet, sheet) {
			r.set(t, 1, colMinimum, colMaximum)
			return i, r
		}, run, 1, colMaximum, "twice"},
		{"non-numeric count", func(t *testing.T, i, r sheet) (sheet, sheet) {
			i.set(t, 3, "minute_2", "many")
			return i, r
		}, inv, 3, "minute_2", "not a number"},
		{"negative count", func(t *testing.T, i, r sheet) (sheet, sheet) {
			i.set(t, 2, "minute_1440", "-1")
			return i, r
		}, inv, 2, "minute_1440", "negative"},
		{"fractional count", func(t *testing.T, i, r sheet) (sheet, sheet) {
			i.set(t, 4, "minute_7", "1.5")
			return i, r
		}, inv, 4, "minute_7", "whole number"},
		{"huge count", func(t *testing.T, i, r sheet) (sheet, sheet) {
			i.set(t, 2, "minute_1", "99999999999")
			return i, r
		}, inv, 2, "minute_1", "more than"},
		{"non-numeric average", func(t *testing.T, i, r sheet) (sheet, sheet) {
			r.set(t, 3, colAverage, "slow")
			return i, r
		}, run, 3, colAverage, "not a number"},
		{"negative minimum", func(t *testing.T, i, r sheet) (sheet, sheet) {
			r.set(t, 2, colMinimum, "-2")
			return i, r
		}, run, 2, colMinimum, "negative"},
		{"NaN percentile", func(t *testing.T, i, r sheet) (sheet, sheet) {
			r.set(t, 4, "percentile_Average_75", "NaN")
			return i, r
		}, run, 4, "percentile_Average_75", "NaN"},
		{"Inf maximum", func(t *testing.T, i, r sheet) (sheet, sheet) {
			r.set(t, 2, colMaximum, "+Inf")
			return i, r
		}, run, 2, colMaximum, "not finite"},
		{"overflowing average", func(t *testing.T, i, r sheet) (sheet, sheet) {
			r.set(t, 2, colAverage, "1e400")
			return i, r
		}, run, 2, colAverage, "not finite"},
		{"implausible duration", func(t *testing.T, i, r sheet) (sheet, sheet) {
			r.set(t, 2, "percentile_Average_100", "1e12")
			return i, r
		}, run, 2, "percentile_Average_100", "more than"},
		{"negative count in run", func(t *testing.T, i, r sheet) (sheet, sheet) {
			r.set(t, 3, colCount, "-4")
			return i, r
		}, run, 3, colCount, "negative"},
		{"percentiles out of order", func(t *testing.T, i, r sheet) (sheet, sheet) {
			r.set(t, 3, "percentile_Average_50", "150")
			return i, r
		}, run, 3, "percentile_Average_50", "must not decrease"},
		{"last percentile below the 99th", func(t *testing.T, i, r sheet) (sheet, sheet) {
			r.set(t, 2, "percentile_Average_100", "24")
			return i, r
		}, run, 2, "percentile_Average_100", "must not decrease"},
		{"count zero with invocations", func(t *testing.T, i, r sheet) (sheet, sheet) {
			r.set(t, 2, colCount, "0")
			return i, r
		}, run, 2, colCount, "has 8 invocations"},
		{"count zero, invoked outside the window", func(t *testing.T, i, r sheet) (sheet, sheet) {
			r.set(t, 4, colCount, "0")
			return i, r
		}, run, 4, colCount, "has 2 invocations"},
		{"duplicate function in inv", func(t *testing.T, i, r sheet) (sheet, sheet) {
			return append(i, slices.Clone(i[1])), r
		}, inv, 5, colFunction, "already on row 2"},
		{"duplicate function in run", func(t *testing.T, i, r sheet) (sheet, sheet) {
			return i, append(r, slices.Clone(r[2]))
		}, run, 5, colFunction, "already on row 3"},
		{"empty hash", func(t *testing.T, i, r sheet) (sheet, sheet) {
			i.set(t, 3, colApp, "")
			return i, r
		}, inv, 3, colApp, "empty"},
		{"short row", func(t *testing.T, i, r sheet) (sheet, sheet) {
			i[2] = i[2][:len(i[2])-1]
			return i, r
		}, inv, 3, "minute_1440", "missing"},
		{"short run row", func(t *testing.T, i, r sheet) (sheet, sheet) {
			r[3] = r[3][:5]
			return i, r
		}, run, 4, colMinimum, "missing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			i, r := tt.mutate(t, invSheet(baseFns...).clone(), runSheet(baseFns...).clone())
			dir := writeDir(t, i.bytes(t), r.bytes(t))
			_, err := Load(dir, Options{StartMinute: 1, Minutes: 3})
			checkError(t, err, filepath.Join(dir, tt.file), tt.row, tt.column, tt.msg)
		})
	}
}

func checkError(t *testing.T, err error, file string, row int, column, msg string) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error = %v, want *Error", err)
	}
	if e.File != file || e.Row != row || e.Column != column || !strings.Contains(e.Msg, msg) {
		t.Fatalf("error = %+v, want file %s row %d column %q message containing %q", e, file, row, column, msg)
	}
	s := err.Error()
	for _, want := range []string{file, fmt.Sprintf("row %d", row), "column " + column, msg} {
		if (row == 0 && strings.HasPrefix(want, "row")) || (column == "" && strings.HasPrefix(want, "column")) {
			continue
		}
		if !strings.Contains(s, want) {
			t.Errorf("%q lacks %q", s, want)
		}
	}
}

// Problems with a file as a whole name the file and, where it has one, the row.
func TestLoadFileErrors(t *testing.T) {
	t.Parallel()
	good := func(t *testing.T) (string, []byte, []byte) {
		return t.TempDir(), invSheet(baseFns...).bytes(t), runSheet(baseFns...).bytes(t)
	}
	write := func(t *testing.T, path string, data []byte) {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name  string
		setup func(t *testing.T) (dir, file string)
		row   int
		msg   string
	}{
		{"empty inv", func(t *testing.T) (string, string) {
			dir, _, run := good(t)
			write(t, filepath.Join(dir, "x_inv.csv"), nil)
			write(t, filepath.Join(dir, "x_run.csv"), run)
			return dir, "x_inv.csv"
		}, 1, "file is empty"},
		{"empty run", func(t *testing.T) (string, string) {
			dir, inv, _ := good(t)
			write(t, filepath.Join(dir, "x_inv.csv"), inv)
			write(t, filepath.Join(dir, "x_run.csv"), nil)
			return dir, "x_run.csv"
		}, 1, "file is empty"},
		{"header only", func(t *testing.T) (string, string) {
			dir, inv, run := good(t)
			write(t, filepath.Join(dir, "x_inv.csv"), inv[:strings.IndexByte(string(inv), '\n')+1])
			write(t, filepath.Join(dir, "x_run.csv"), run)
			return dir, "x_inv.csv"
		}, 2, "no data rows"},
		{"over 64 MiB", func(t *testing.T) (string, string) {
			dir, inv, run := good(t)
			write(t, filepath.Join(dir, "x_inv.csv"), inv)
			path := filepath.Join(dir, "x_run.csv")
			write(t, path, run)
			if err := os.Truncate(path, MaxFileBytes+1); err != nil { // sparse, so cheap
				t.Fatal(err)
			}
			return dir, "x_run.csv"
		}, 0, "larger than"},
		{"too many functions", func(t *testing.T) (string, string) {
			dir, inv, _ := good(t)
			write(t, filepath.Join(dir, "x_inv.csv"), inv)
			var b strings.Builder
			b.WriteString(strings.Join(runSheet()[0], ",") + "\n")
			for i := range MaxFunctions + 1 {
				fmt.Fprintf(&b, "%x,a,o,1,1,1,1,1,1,1,1,1,1,1\n", i)
			}
			write(t, filepath.Join(dir, "x_run.csv"), []byte(b.String()))
			return dir, "x_run.csv"
		}, MaxFunctions + 2, "more than 100000 functions"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir, file := tt.setup(t)
			_, err := Load(dir, Options{StartMinute: 1, Minutes: 3})
			checkError(t, err, filepath.Join(dir, file), tt.row, "", tt.msg)
		})
	}
}

func TestLoadDirErrors(t *testing.T) {
	t.Parallel()
	inv, run := invSheet(baseFns...), runSheet(baseFns...)
	tests := []struct {
		name  string
		files map[string]sheet
		want  string
	}{
		{"no inv", map[string]sheet{"x_run.csv": run}, "no *_inv.csv file"},
		{"no run", map[string]sheet{"x_inv.csv": inv}, "no *_run.csv file"},
		{"two invs", map[string]sheet{"a_inv.csv": inv, "b_inv.csv": inv, "a_run.csv": run}, "2 *_inv.csv files (a_inv.csv, b_inv.csv), want exactly one"},
		{"two runs", map[string]sheet{"a_inv.csv": inv, "a_run.csv": run, "b_run.csv": run}, "2 *_run.csv files"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			for name, s := range tt.files {
				if err := os.WriteFile(filepath.Join(dir, name), s.bytes(t), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			_, err := Load(dir, Options{StartMinute: 1})
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), dir) {
				t.Fatalf("error = %v, want it to name %s and contain %q", err, dir, tt.want)
			}
		})
	}
	if _, err := Load(filepath.Join(t.TempDir(), "absent"), Options{}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing dir: error = %v", err)
	}
}

func TestLoadOptionErrors(t *testing.T) {
	t.Parallel()
	dir := writeDir(t, invSheet(baseFns...).bytes(t), runSheet(baseFns...).bytes(t))
	tests := []struct {
		name string
		opts Options
		want string
	}{
		{"start before the day", Options{StartMinute: -1}, "start minute -1 is outside the day"},
		{"start after the day", Options{StartMinute: 1441}, "start minute 1441 is outside the day"},
		{"window past the day", Options{StartMinute: 1440, Minutes: 2}, "minutes 1440-1441 run past the end"},
		{"negative minutes", Options{Minutes: -1}, "window of -1 minutes"},
		{"negative compression", Options{Compression: -0.5}, "compression -0.5"},
		{"NaN compression", Options{Compression: math.NaN()}, "compression NaN"},
		{"infinite compression", Options{Compression: math.Inf(1)}, "compression +Inf"},
		{"negative load", Options{Load: -1}, "target load -1"},
		{"NaN load", Options{Load: math.NaN()}, "target load NaN"},
		{"infinite load", Options{Load: math.Inf(1)}, "target load +Inf"},
		{"tiny load", Options{StartMinute: 1, Load: 1e-300}, "need more than 1000000 workers"},
		{"nothing in the window", Options{StartMinute: 200}, "minutes 200-259"}, // DefaultMinutes long
		{"nothing in a short window", Options{StartMinute: 4, Minutes: 10}, "minutes 4-13"},
		{"compression too small", Options{Compression: minCompression / 2}, "compression 0.0005 must be between 0.001 and 1000"},
		{"compression too large", Options{Compression: 1001}, "compression 1001"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Load(dir, tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error = %v, want it to contain %q", err, tt.want)
			}
		})
	}
	if _, err := Load(dir, Options{StartMinute: 200}); !errors.Is(err, ErrNoArrivals) {
		t.Errorf("empty window: error = %v, want ErrNoArrivals", err)
	}
}

func TestLoadAcceptsBOMAndExtraColumns(t *testing.T) {
	t.Parallel()
	inv, run := invSheet(baseFns...), runSheet(baseFns...)
	for _, s := range []sheet{inv, run} {
		for i := range s {
			s[i] = append(s[i], "extra")
		}
		s[0][0] = "\uFEFF" + s[0][0]
	}
	tr := mustLoad(t, writeDir(t, inv.bytes(t), run.bytes(t)), Options{StartMinute: 1, Minutes: 3})
	if n := len(tr.Types()); n != 2 {
		t.Errorf("%d types, want 2", n)
	}
}

// The Stat check catches most large files; sizeLimit catches one that grows
// while it is read.
func TestSizeLimit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		data string
		left int64
		want error
	}{
		{"abcdef", 6, nil},
		{"abcdef", 10, nil},
		{"abcdef", 5, errTooLarge},
		{"abcdef", 0, errTooLarge},
	}
	for _, tt := range tests {
		got, err := io.ReadAll(&sizeLimit{r: strings.NewReader(tt.data), left: tt.left})
		if !errors.Is(err, tt.want) || (tt.want == nil && string(got) != tt.data) {
			t.Errorf("ReadAll(%q, left %d) = %q, %v; want error %v", tt.data, tt.left, got, err, tt.want)
		}
	}
}
