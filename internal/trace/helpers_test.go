package trace

import (
	"bytes"
	"encoding/csv"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
)

// sheet is a CSV file under construction: a header and rows of cells.
type sheet [][]string

func (s sheet) clone() sheet {
	c := make(sheet, len(s))
	for i, r := range s {
		c[i] = slices.Clone(r)
	}
	return c
}

// set writes value into row (1-based, header is 1) under column.
func (s sheet) set(t *testing.T, row int, column, value string) {
	t.Helper()
	i := slices.Index(s[0], column)
	if i < 0 {
		t.Fatalf("test setup: no column %q", column)
	}
	s[row-1][i] = value
}

func (s sheet) bytes(t testing.TB) []byte {
	t.Helper()
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	if err := w.WriteAll(s); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// fn describes one synthetic function for both files.
type fn struct {
	hash   string
	counts map[int]int // minute -> invocations
	count  string      // run Count
	curve  [7]float64  // ms at percentiles 0, 1, 25, 50, 75, 99, 100
	mean   float64     // run Average
}

func invSheet(fns ...fn) sheet {
	header := []string{colFunction, colApp, colOwner}
	for m := 1; m <= dayMinutes; m++ {
		header = append(header, minuteColumn(m))
	}
	s := sheet{header}
	for _, f := range fns {
		row := []string{f.hash, "app-" + f.hash, "owner"}
		for m := 1; m <= dayMinutes; m++ {
			row = append(row, strconv.Itoa(f.counts[m]))
		}
		s = append(s, row)
	}
	return s
}

func runSheet(fns ...fn) sheet {
	header := []string{colFunction, colApp, colOwner, colCount, colAverage, colMinimum, colMaximum}
	header = append(header, percentileColumns[:]...)
	s := sheet{header}
	ftoa := func(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }
	for _, f := range fns {
		count := f.count
		if count == "" {
			total := 0
			for _, n := range f.counts {
				total += n
			}
			count = strconv.Itoa(total)
		}
		row := []string{f.hash, "app-" + f.hash, "owner", count, ftoa(f.mean), ftoa(f.curve[0]), ftoa(f.curve[6])}
		for _, q := range f.curve {
			row = append(row, ftoa(q))
		}
		s = append(s, row)
	}
	return s
}

// baseFns is a small valid trace: two functions invoked in minutes 1-3 and
// one invoked only at minute 100.
var baseFns = []fn{
	{hash: "aaaaaaaaaaaaaaaa", counts: map[int]int{1: 3, 2: 5}, curve: [7]float64{1, 2, 5, 10, 15, 25, 30}, mean: 10},
	{hash: "bbbbbbbbbbbbbbbb", counts: map[int]int{2: 1, 3: 2}, curve: [7]float64{100, 100, 200, 300, 400, 900, 1000}, mean: 320},
	{hash: "cccccccccccccccc", counts: map[int]int{100: 2}, curve: [7]float64{5, 5, 5, 5, 5, 5, 5}, mean: 5},
}

// writeDir writes the two files as x_inv.csv and x_run.csv in a new directory.
func writeDir(t testing.TB, inv, run []byte) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "x_inv.csv"), inv, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "x_run.csv"), run, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func mustLoad(t *testing.T, dir string, opts Options) *Trace {
	t.Helper()
	tr, err := Load(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}
