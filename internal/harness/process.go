package harness

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// clockTicks is the unit of utime and stime in /proc/PID/stat (USER_HZ),
// 100 on every Linux architecture Go supports.
const clockTicks = 100

// ProcessStartTimeout bounds how long a broker process may take to say it
// is listening.
const ProcessStartTimeout = 30 * time.Second

// processStopTimeout is how long a broker process gets after SIGTERM
// before it is killed.
const processStopTimeout = 10 * time.Second

// BrokerProcess is a broker the harness started as a child process: a
// fresh harbinger serve, bare queue server, nats-server or redis-server.
type BrokerProcess struct {
	name string
	cmd  *exec.Cmd
	addr string // where it listens, from its own output or the port it was given
	tail *tailBuffer
	done chan struct{} // closed when the process has exited
	err  error         // its exit status, set before done closes
}

// StartProcess starts bin with args and waits until ready finds the
// listening address in a line of its output (stdout and stderr both). A
// ready that needs no line (the port was chosen beforehand) returns it from
// probe instead: probe, when set, is retried until it succeeds.
func StartProcess(ctx context.Context, name, bin string, args []string, ready func(line string) (addr string, ok bool), probe func(ctx context.Context) (string, error)) (*BrokerProcess, error) {
	cmd := exec.Command(bin, args...)
	cmd.Stdin = nil
	// Its own process group, so that a Ctrl-C at the terminal reaches the
	// harness, which then stops the broker in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	p := &BrokerProcess{name: name, cmd: cmd, tail: &tailBuffer{max: 4 << 10}, done: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("harness: starting %s: %w", name, err)
	}
	go func() {
		p.err = cmd.Wait()
		pw.Close()
		close(p.done)
	}()
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			p.tail.add(line)
			if ready != nil {
				if addr, ok := ready(line); ok {
					select {
					case found <- addr:
					default:
					}
				}
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	sctx, cancel := context.WithTimeout(ctx, ProcessStartTimeout)
	defer cancel()
	if probe != nil {
		go func() {
			t := time.NewTicker(20 * time.Millisecond)
			defer t.Stop()
			for {
				if addr, err := probe(sctx); err == nil {
					found <- addr
					return
				}
				select {
				case <-sctx.Done():
					return
				case <-t.C:
				}
			}
		}()
	}
	select {
	case p.addr = <-found:
		return p, nil
	case <-p.done:
		return nil, fmt.Errorf("harness: %s exited before it was ready (%v): %s", name, p.err, p.tail)
	case <-sctx.Done():
		p.Stop()
		return nil, fmt.Errorf("harness: %s not ready within %s: %s", name, ProcessStartTimeout, p.tail)
	}
}

// pid is the process id, for its CPU and memory accounting.
func (p *BrokerProcess) PID() int { return p.cmd.Process.Pid }

// stop sends SIGTERM, waits for the process to exit, and kills it if it
// has not within processStopTimeout.
func (p *BrokerProcess) Stop() error {
	select {
	case <-p.done:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(processStopTimeout):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("harness: %s did not stop within %s of SIGTERM and was killed", p.name, processStopTimeout)
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) && !ee.Exited() {
		return nil // ended by the signal, as asked
	}
	return p.err
}

// tailBuffer keeps the last bytes of a process's output for error messages.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) add(line string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, line...)
	t.b = append(t.b, '\n')
	if len(t.b) > t.max {
		t.b = t.b[len(t.b)-t.max:]
	}
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := strings.TrimSpace(string(t.b))
	if s == "" {
		return "(no output)"
	}
	return s
}

// FreePort returns a loopback port nothing listens on now, for a server
// that cannot report the port it bound (redis-server). Another process
// could take it before the server does; the caller's start then fails.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// ProcCPU is the CPU time a process has used, user plus system, from
// /proc/PID/stat: the process's own accounting, threads included.
func ProcCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces;
	// fields are counted from the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("harness: /proc/%d/stat: unexpected format", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// After the name: state is field 3, utime field 14, stime field 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("harness: /proc/%d/stat: too few fields", pid)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("harness: /proc/%d/stat: unparsable utime or stime", pid)
	}
	return time.Duration(ut+st) * time.Second / clockTicks, nil
}

// SelfCPU is the harness process's own CPU time, user plus system.
func SelfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ProcRSS is a process's resident set size, from /proc/PID/status.
func ProcRSS(pid int) (int64, error) { return ProcStatusKB(pid, "VmRSS:") }

// statusKB finds field (e.g. "VmRSS:") in the text of /proc/PID/status
// and returns its value in bytes.
func statusKB(status, field string) (int64, error) {
	for line := range strings.SplitSeq(status, "\n") {
		if v, ok := strings.CutPrefix(line, field); ok {
			f := strings.Fields(v)
			if len(f) == 2 && f[1] == "kB" {
				kb, err := strconv.ParseInt(f[0], 10, 64)
				return kb << 10, err
			}
		}
	}
	return 0, fmt.Errorf("harness: no %s in /proc/PID/status", field)
}

// FindProcess returns the pid of the only process whose command name is
// comm and whose command line contains arg, or 0 if there is none or more
// than one. It is how the harness finds a broker it did not start
// (RabbitMQ's beam.smp) for its CPU accounting.
func FindProcess(comm, arg string) int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	found := 0
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		c, err := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
		if err != nil || strings.TrimSpace(string(c)) != comm {
			continue
		}
		cl, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(cl, []byte(arg)) {
			continue
		}
		if found != 0 {
			return 0
		}
		found = pid
	}
	return found
}

// IsProcess reports whether pid is a running process named comm: a pid a
// broker reported about itself is only used for accounting when it is
// on this machine.
func IsProcess(pid int, comm string) bool {
	if pid <= 0 {
		return false
	}
	c, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return err == nil && strings.TrimSpace(string(c)) == comm
}

// DirSize is the total size of the regular files under dir.
func DirSize(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// FSType names the filesystem dir is on, for the method line: an fsync
// on tmpfs costs nothing, so a durable figure means little there.
func FSType(dir string) string {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return "an unknown filesystem"
	}
	names := map[int64]string{0xEF53: "ext4", 0x58465342: "xfs", 0x9123683E: "btrfs", 0x01021994: "tmpfs (fsync costs nothing there)",
		0x794c7630: "overlayfs", 0x2FC12FC1: "zfs", 0x6969: "nfs"}
	if n, ok := names[int64(st.Type)]; ok {
		return n
	}
	return fmt.Sprintf("filesystem type %#x", st.Type)
}

// Addr is where the process listens.
func (p *BrokerProcess) Addr() string { return p.addr }

// ListeningAt stands for a server at addr that runs in this process, for
// tests of a driver that dials a BrokerProcess: only Addr is usable.
func ListeningAt(addr string) *BrokerProcess { return &BrokerProcess{addr: addr} }
