package trace

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Limits that bound the memory and the job count a trace can ask for, so a
// damaged or hostile file fails cleanly instead of exhausting the machine.
const (
	MaxFileBytes  = 64 << 20 // per CSV file
	MaxFunctions  = 100_000  // data rows per CSV file
	maxCellCount  = 10_000_000
	maxJobs       = 20_000_000 // invocations in one window; matches the workload package
	maxDurationMS = 30 * 24 * 3600 * 1000
	maxWorkers    = 1_000_000
)

// Day length of the trace, in minutes; inv files have one column per minute.
const dayMinutes = 1440

// File name suffixes that identify the two halves of a trace in a directory.
const (
	invSuffix = "_inv.csv"
	runSuffix = "_run.csv"
)

// Column names, located by header and never by position.
const (
	colFunction = "HashFunction"
	colApp      = "HashApp"
	colOwner    = "HashOwner"
	colCount    = "Count"
	colAverage  = "Average"
	colMinimum  = "Minimum"
	colMaximum  = "Maximum"
)

// percentileColumns and percentilePoints describe one function's duration
// curve: the value in column i is the duration at quantile percentilePoints[i].
var (
	percentileColumns = [...]string{
		"percentile_Average_0", "percentile_Average_1", "percentile_Average_25",
		"percentile_Average_50", "percentile_Average_75", "percentile_Average_99",
		"percentile_Average_100",
	}
	percentilePoints = [...]float64{0, 0.01, 0.25, 0.50, 0.75, 0.99, 1}
)

// medianIndex is the position of the median in percentilePoints.
const medianIndex = 3

func minuteColumn(m int) string { return "minute_" + strconv.Itoa(m) }

// Error is a problem in a trace file, located by 1-based row (the header is
// row 1) and column name. Row is 0 and Column empty when the problem is the
// file as a whole.
type Error struct {
	File   string
	Row    int
	Column string
	Msg    string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("trace: ")
	b.WriteString(e.File)
	if e.Row > 0 {
		fmt.Fprintf(&b, ": row %d", e.Row)
	}
	if e.Column != "" {
		fmt.Fprintf(&b, ": column %s", e.Column)
	}
	b.WriteString(": ")
	b.WriteString(e.Msg)
	return b.String()
}

// ErrNoArrivals is returned when no function present in both files is invoked
// in the chosen window, so there is nothing to replay.
var ErrNoArrivals = errors.New("trace: no function present in both files is invoked in the window")

// errTooLarge is what sizeLimit returns once a file grows past MaxFileBytes
// while being read (the size can change after the Stat check).
var errTooLarge = errors.New("trace: file too large")

// key identifies a function; the two files are joined on it.
type key struct{ function, app, owner string }

// invRow is one function of the inv file, reduced to what a window needs.
type invRow struct {
	key    key
	row    int
	day    int64   // invocations over the whole day
	window []int32 // invocations per minute of the window; nil when none
	total  int64   // sum of window
}

// runRow is one function of the run file.
type runRow struct {
	row     int
	count   float64
	average float64
	curve   [len(percentilePoints)]float64 // ms at each percentile point
}

// findFiles returns the single *_inv.csv and *_run.csv in dir.
func findFiles(dir string) (inv, run string, err error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", "", fmt.Errorf("trace: %w", err)
	}
	var invs, runs []string
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		switch {
		case strings.HasSuffix(e.Name(), invSuffix):
			invs = append(invs, e.Name())
		case strings.HasSuffix(e.Name(), runSuffix):
			runs = append(runs, e.Name())
		}
	}
	one := func(names []string, suffix string) (string, error) {
		switch len(names) {
		case 1:
			return filepath.Join(dir, names[0]), nil
		case 0:
			return "", fmt.Errorf("trace: %s: no *%s file", dir, suffix)
		default:
			return "", fmt.Errorf("trace: %s: %d *%s files (%s), want exactly one", dir, len(names), suffix, strings.Join(names, ", "))
		}
	}
	if inv, err = one(invs, invSuffix); err != nil {
		return "", "", err
	}
	if run, err = one(runs, runSuffix); err != nil {
		return "", "", err
	}
	return inv, run, nil
}

// table reads one CSV file row by row, checking its size and row count and
// locating columns by header name.
type table struct {
	path   string
	f      *os.File
	r      *csv.Reader
	header []string
	col    map[string]int
	row    int // 1-based row of the record last read
	rows   int // data rows read
}

func openTable(path string, required []string) (*table, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	t := &table{path: path, f: f}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("trace: %w", err)
	}
	if info.Size() > MaxFileBytes {
		f.Close()
		return nil, t.fail("", "larger than %d bytes (%d)", MaxFileBytes, info.Size())
	}
	t.r = csv.NewReader(&sizeLimit{r: f, left: MaxFileBytes})
	t.r.ReuseRecord = true
	t.r.FieldsPerRecord = 0 // the header sets it; every later row must match

	header, err := t.r.Read()
	t.row = 1
	if errors.Is(err, io.EOF) {
		f.Close()
		return nil, t.fail("", "file is empty, want a header row")
	}
	if err != nil {
		f.Close()
		return nil, t.readError(header, err)
	}
	t.header = slices.Clone(header)
	t.header[0] = strings.TrimPrefix(t.header[0], "\uFEFF")
	t.col = make(map[string]int, len(t.header))
	for i, name := range t.header {
		if _, dup := t.col[name]; dup {
			f.Close()
			return nil, t.fail(name, "column appears twice in the header")
		}
		t.col[name] = i
	}
	for _, name := range required {
		if _, ok := t.col[name]; !ok {
			f.Close()
			return nil, t.fail(name, "missing column")
		}
	}
	return t, nil
}

func (t *table) close() { t.f.Close() }

// fail builds an Error at the current row.
func (t *table) fail(column, format string, args ...any) *Error {
	return &Error{File: t.path, Row: t.row, Column: column, Msg: fmt.Sprintf(format, args...)}
}

// next returns the next data row, or io.EOF after the last one. The returned
// slice is reused by the following call.
func (t *table) next() ([]string, error) {
	rec, err := t.r.Read()
	if errors.Is(err, io.EOF) {
		if t.rows == 0 {
			t.row = 2
			return nil, t.fail("", "no data rows after the header")
		}
		return nil, io.EOF
	}
	t.row++
	if err != nil {
		return nil, t.readError(rec, err)
	}
	t.rows++
	if t.rows > MaxFunctions {
		return nil, t.fail("", "more than %d functions", MaxFunctions)
	}
	return rec, nil
}

func (t *table) readError(rec []string, err error) error {
	if errors.Is(err, errTooLarge) {
		return t.fail("", "larger than %d bytes", MaxFileBytes)
	}
	if errors.Is(err, csv.ErrFieldCount) {
		if len(rec) < len(t.header) {
			return t.fail(t.header[len(rec)], "missing (the row has %d fields, the header %d)", len(rec), len(t.header))
		}
		return t.fail("", "the row has %d fields, the header %d", len(rec), len(t.header))
	}
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return t.fail("", "%v (line %d, character %d)", pe.Err, pe.Line, pe.Column)
	}
	return fmt.Errorf("trace: reading %s: %w", t.path, err)
}

// text returns the cell of a named column, which must not be empty.
func (t *table) text(rec []string, column string) (string, error) {
	s := rec[t.col[column]]
	if s == "" {
		return "", t.fail(column, "empty")
	}
	return strings.Clone(s), nil
}

// count parses a per-minute invocation count: a whole number in [0, maxCellCount].
func (t *table) count(rec []string, i int) (int64, error) {
	s := rec[i]
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		if _, ferr := strconv.ParseFloat(s, 64); ferr == nil {
			return 0, t.fail(t.header[i], "want a whole number of invocations, got %q", s)
		}
		return 0, t.fail(t.header[i], "not a number: %q", s)
	}
	if n < 0 {
		return 0, t.fail(t.header[i], "negative: %d", n)
	}
	if n > maxCellCount {
		return 0, t.fail(t.header[i], "%d invocations in one minute, more than %d", n, maxCellCount)
	}
	return n, nil
}

// number parses a finite number in [0, hi] from a named column.
func (t *table) number(rec []string, column string, hi float64) (float64, error) {
	s := rec[t.col[column]]
	f, err := strconv.ParseFloat(s, 64)
	switch {
	case err != nil && !errors.Is(err, strconv.ErrRange):
		return 0, t.fail(column, "not a number: %q", s)
	case err != nil || math.IsInf(f, 0):
		return 0, t.fail(column, "not finite: %q", s)
	case math.IsNaN(f):
		return 0, t.fail(column, "NaN")
	case f < 0:
		return 0, t.fail(column, "negative: %s", s)
	case f > hi:
		return 0, t.fail(column, "%s is more than %g", s, hi)
	}
	return f, nil
}

// sizeLimit fails reads once more than left bytes have been read.
type sizeLimit struct {
	r    io.Reader
	left int64
}

func (s *sizeLimit) Read(p []byte) (int, error) {
	if s.left < 0 {
		return 0, errTooLarge
	}
	if int64(len(p)) > s.left+1 {
		p = p[:s.left+1]
	}
	n, err := s.r.Read(p)
	s.left -= int64(n)
	if s.left < 0 {
		return n, errTooLarge
	}
	return n, err
}

// readInv reads the inv file, keeping each function's day total and its
// counts inside the window [start, start+minutes).
func readInv(path string, start, minutes int) ([]invRow, error) {
	required := []string{colFunction, colApp, colOwner}
	for m := 1; m <= dayMinutes; m++ {
		required = append(required, minuteColumn(m))
	}
	t, err := openTable(path, required)
	if err != nil {
		return nil, err
	}
	defer t.close()

	// minuteCol[m-1] is the record index of minute_m.
	minuteCol := make([]int, dayMinutes)
	for m := 1; m <= dayMinutes; m++ {
		minuteCol[m-1] = t.col[minuteColumn(m)]
	}
	var (
		rows   []invRow
		seen   = map[key]int{}
		window = make([]int32, minutes)
		jobs   int64
	)
	for {
		rec, err := t.next()
		if errors.Is(err, io.EOF) {
			return rows, nil
		}
		if err != nil {
			return nil, err
		}
		k, err := readKey(t, rec)
		if err != nil {
			return nil, err
		}
		if first, dup := seen[k]; dup {
			return nil, t.fail(colFunction, "function %s (app %s, owner %s) already on row %d", k.function, k.app, k.owner, first)
		}
		seen[k] = t.row
		r := invRow{key: k, row: t.row}
		for m := 1; m <= dayMinutes; m++ {
			n, err := t.count(rec, minuteCol[m-1])
			if err != nil {
				return nil, err
			}
			r.day += n
			if m >= start && m < start+minutes {
				window[m-start] = int32(n)
				r.total += n
			}
		}
		if r.total > 0 {
			r.window = slices.Clone(window)
			jobs += r.total
			if jobs > maxJobs {
				return nil, t.fail("", "the window holds more than %d invocations", maxJobs)
			}
		}
		rows = append(rows, r)
	}
}

// readRun reads the run file: each function's count, mean and percentile curve.
func readRun(path string) (map[key]runRow, error) {
	required := []string{colFunction, colApp, colOwner, colCount, colAverage, colMinimum, colMaximum}
	required = append(required, percentileColumns[:]...)
	t, err := openTable(path, required)
	if err != nil {
		return nil, err
	}
	defer t.close()

	runs := map[key]runRow{}
	for {
		rec, err := t.next()
		if errors.Is(err, io.EOF) {
			return runs, nil
		}
		if err != nil {
			return nil, err
		}
		k, err := readKey(t, rec)
		if err != nil {
			return nil, err
		}
		if first, dup := runs[k]; dup {
			return nil, t.fail(colFunction, "function %s (app %s, owner %s) already on row %d", k.function, k.app, k.owner, first.row)
		}
		r := runRow{row: t.row}
		if r.count, err = t.number(rec, colCount, math.MaxInt64); err != nil {
			return nil, err
		}
		if r.average, err = t.number(rec, colAverage, maxDurationMS); err != nil {
			return nil, err
		}
		for _, c := range []string{colMinimum, colMaximum} {
			if _, err := t.number(rec, c, maxDurationMS); err != nil {
				return nil, err
			}
		}
		for i, c := range percentileColumns {
			if r.curve[i], err = t.number(rec, c, maxDurationMS); err != nil {
				return nil, err
			}
			if i > 0 && r.curve[i] < r.curve[i-1] {
				return nil, t.fail(c, "%g is less than %s (%g); percentiles must not decrease", r.curve[i], percentileColumns[i-1], r.curve[i-1])
			}
		}
		runs[k] = r
	}
}

func readKey(t *table, rec []string) (key, error) {
	var k key
	var err error
	if k.function, err = t.text(rec, colFunction); err != nil {
		return k, err
	}
	if k.app, err = t.text(rec, colApp); err != nil {
		return k, err
	}
	if k.owner, err = t.text(rec, colOwner); err != nil {
		return k, err
	}
	return k, nil
}
