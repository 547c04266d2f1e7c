// Package rmqcluster starts a RabbitMQ cluster of nodes on this machine,
// for the tests and benchmarks that need more than the machine's one
// RabbitMQ: each node is its own rabbitmq-server with its own node name,
// AMQP and distribution ports, config, data and log directories under a
// temporary directory of the cluster's own, joined to the first node with
// rabbitmqctl. It owns the nodes' lifecycle: start, SIGKILL one node, and
// tear everything down so that no process is left behind; a cluster whose
// owner died before it could (a test binary killed by its timeout) is torn
// down by the next Start (ReapOrphans).
//
// No plugins run, so no management or Prometheus port is opened. The
// nodes share a cookie: a fresh one in a home directory of the cluster's
// own, or, where the rabbitmq-server script switches to the rabbitmq user
// (a root run of the distribution package), that user's, which the
// rabbitmqctl calls then use too.
package rmqcluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Config defaults.
const (
	// DefaultNodes is a cluster's size when Config.Nodes is zero: the
	// smallest that keeps a majority with one node down.
	DefaultNodes = 3
	// DefaultStartTimeout bounds the start of the nodes and each join step.
	DefaultStartTimeout = 90 * time.Second
	// killTimeout is how long a node's script gets to exit after SIGKILL.
	killTimeout = 30 * time.Second
	// epmdTimeout is how long teardown waits for epmd to forget the nodes.
	epmdTimeout = 10 * time.Second
)

// Config configures Start.
type Config struct {
	// Nodes is how many nodes to start; default DefaultNodes.
	Nodes int
	// Dir is the parent of the cluster's temporary directory; default
	// os.TempDir().
	Dir string
	// StartTimeout bounds the nodes' boot and each join step; default
	// DefaultStartTimeout.
	StartTimeout time.Duration
	// Progress, if set, is told about each step of the start.
	Progress io.Writer
}

// WithDefaults fills the zero fields.
func (c Config) WithDefaults() Config {
	if c.Nodes == 0 {
		c.Nodes = DefaultNodes
	}
	if c.StartTimeout == 0 {
		c.StartTimeout = DefaultStartTimeout
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.Nodes < 1:
		return fmt.Errorf("rmqcluster: a cluster needs at least one node, got %d", c.Nodes)
	case c.StartTimeout < 0:
		return fmt.Errorf("rmqcluster: the start timeout must not be negative, got %s", c.StartTimeout)
	}
	return nil
}

// ErrNotInstalled is returned by Start when rabbitmq-server or rabbitmqctl
// is not on the PATH.
var ErrNotInstalled = errors.New("rmqcluster: rabbitmq-server and rabbitmqctl are needed on the PATH")

// Node is one node of a Cluster.
type Node struct {
	// Name is the Erlang node name, e.g. hb4242a1@localhost.
	Name string
	// AMQPPort is the node's AMQP listener on 127.0.0.1.
	AMQPPort int
	// DistPort is the node's Erlang distribution port.
	DistPort int

	dir    string
	env    []string
	cmd    *exec.Cmd // the rabbitmq-server script, in a process group of its own
	exited chan struct{}
}

// URL is the node's AMQP URL with the default guest account (allowed from
// loopback).
func (n *Node) URL() string { return fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", n.AMQPPort) }

// Cluster is a running cluster. Its nodes run until Kill, Stop or Close,
// whatever happens to the context Start was given.
type Cluster struct {
	dir   string
	nodes []*Node
	out   io.Writer
}

// Start starts cfg.Nodes nodes and joins them into one cluster. ctx bounds
// the start only. An error means the cluster could not start (no
// rabbitmq-server, a node that did not boot); whatever did start is torn
// down already.
func Start(ctx context.Context, cfg Config) (_ *Cluster, err error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	for _, bin := range []string{"rabbitmq-server", "rabbitmqctl"} {
		if _, err := exec.LookPath(bin); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrNotInstalled, bin, err)
		}
	}
	out := cfg.Progress
	if out == nil {
		out = io.Discard
	}
	parent := cfg.Dir
	if parent == "" {
		parent = os.TempDir()
	}
	for _, r := range ReapOrphans(parent) {
		fmt.Fprintf(out, "rmqcluster: %s\n", r)
	}
	dir, err := os.MkdirTemp(parent, dirPattern)
	if err != nil {
		return nil, err
	}
	c := &Cluster{dir: dir, out: out}
	defer func() {
		if err != nil {
			err = errors.Join(err, c.Close())
		}
	}()
	if err := c.prepare(cfg.Nodes); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.StartTimeout)
	defer cancel()
	fmt.Fprintf(c.out, "rmqcluster: starting %d RabbitMQ nodes in %s\n", len(c.nodes), dir)
	errs := make(chan error, len(c.nodes))
	for _, nd := range c.nodes {
		go func() { errs <- c.boot(ctx, nd) }()
	}
	for range c.nodes {
		if e := <-errs; e != nil && err == nil {
			err = e
		}
	}
	if err != nil {
		return nil, err
	}
	for _, nd := range c.nodes[1:] {
		fmt.Fprintf(c.out, "rmqcluster: joining %s to %s\n", nd.Name, c.nodes[0].Name)
		for _, step := range [][]string{{"stop_app"}, {"join_cluster", c.nodes[0].Name}, {"start_app"}} {
			if _, err := c.ctl(ctx, nd, step...); err != nil {
				return nil, err
			}
		}
		if err := waitAMQP(ctx, nd); err != nil {
			return nil, err
		}
	}
	status, err := c.ctl(ctx, c.nodes[0], "cluster_status")
	if err != nil {
		return nil, err
	}
	for _, nd := range c.nodes {
		if !strings.Contains(status, nd.Name) {
			return nil, fmt.Errorf("rmqcluster: %s is not in the cluster status:\n%s", nd.Name, status)
		}
	}
	fmt.Fprintf(c.out, "rmqcluster: %d nodes up, AMQP on %s\n", len(c.nodes), strings.Join(c.ports(), ", "))
	return c, nil
}

// prepare writes the cluster's home, cookie and environment file and each
// node's directory and config, and picks the ports.
func (c *Cluster) prepare(n int) error {
	// The node scripts may run as the rabbitmq user; let them write here.
	if err := os.Chmod(c.dir, 0o777); err != nil {
		return err
	}
	// Who owns the nodes, for ReapOrphans should this process die
	// without tearing them down.
	if err := os.WriteFile(filepath.Join(c.dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return err
	}
	home := filepath.Join(c.dir, "home")
	if err := os.Mkdir(home, 0o700); err != nil {
		return err
	}
	cookie := make([]byte, 16)
	_, _ = rand.Read(cookie)
	if err := os.WriteFile(filepath.Join(home, ".erlang.cookie"), []byte(strings.ToUpper(hex.EncodeToString(cookie))), 0o400); err != nil {
		return err
	}
	// An empty environment file, so that a machine-wide rabbitmq-env.conf
	// (which may set the node name or ports) does not apply.
	envFile := filepath.Join(c.dir, "rabbitmq-env.conf")
	if err := os.WriteFile(envFile, nil, 0o644); err != nil {
		return err
	}
	id := make([]byte, 3)
	_, _ = rand.Read(id)
	ports, err := freePorts(2 * n)
	if err != nil {
		return err
	}
	for i := range n {
		nd := &Node{
			Name:     fmt.Sprintf("hb%s%d@localhost", hex.EncodeToString(id), i+1),
			AMQPPort: ports[2*i], DistPort: ports[2*i+1],
			dir: filepath.Join(c.dir, fmt.Sprintf("n%d", i+1)),
		}
		if err := os.Mkdir(nd.dir, 0o777); err != nil {
			return err
		}
		if err := os.Chmod(nd.dir, 0o777); err != nil {
			return err
		}
		conf := fmt.Sprintf("listeners.tcp.1 = 127.0.0.1:%d\n", nd.AMQPPort)
		if err := os.WriteFile(filepath.Join(nd.dir, "rabbitmq.conf"), []byte(conf), 0o644); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(nd.dir, "enabled_plugins"), []byte("[].\n"), 0o666); err != nil {
			return err
		}
		nd.env = append(os.Environ(),
			"HOME="+home,
			"RABBITMQ_NODENAME="+nd.Name,
			"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
			"RABBITMQ_NODE_PORT="+strconv.Itoa(nd.AMQPPort),
			"RABBITMQ_DIST_PORT="+strconv.Itoa(nd.DistPort),
			"RABBITMQ_MNESIA_BASE="+filepath.Join(nd.dir, "mnesia"),
			"RABBITMQ_LOG_BASE="+filepath.Join(nd.dir, "log"),
			"RABBITMQ_PID_FILE="+filepath.Join(nd.dir, "beam.pid"),
			"RABBITMQ_CONFIG_FILE="+filepath.Join(nd.dir, "rabbitmq.conf"),
			"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(nd.dir, "enabled_plugins"),
			"RABBITMQ_CONF_ENV_FILE="+envFile,
			"RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=-kernel inet_dist_use_interface {127,0,0,1}",
		)
		c.nodes = append(c.nodes, nd)
	}
	return nil
}

// Nodes returns the cluster's nodes; node 0 is the one the others joined.
func (c *Cluster) Nodes() []*Node { return c.nodes }

// URLs returns every node's AMQP URL, in node order.
func (c *Cluster) URLs() []string {
	urls := make([]string, len(c.nodes))
	for i, nd := range c.nodes {
		urls[i] = nd.URL()
	}
	return urls
}

// Dir is the cluster's directory: each node's config, data and logs
// (n1/, n2/, ...; server.out is the script's output).
func (c *Cluster) Dir() string { return c.dir }

func (c *Cluster) ports() []string {
	var ps []string
	for _, nd := range c.nodes {
		ps = append(ps, strconv.Itoa(nd.AMQPPort))
	}
	return ps
}

// boot starts nd's rabbitmq-server and waits until it accepts AMQP
// connections.
func (c *Cluster) boot(ctx context.Context, nd *Node) error {
	logf, err := os.OpenFile(filepath.Join(nd.dir, "server.out"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o666)
	if err != nil {
		return err
	}
	// Not CommandContext: the node outlives the start.
	cmd := exec.Command("rabbitmq-server")
	cmd.Env, cmd.Stdout, cmd.Stderr = nd.env, logf, logf
	// A process group of its own, so that a Ctrl-C at the terminal reaches
	// the caller, which then tears the cluster down.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("rmqcluster: start %s: %w", nd.Name, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(exited) }()
	nd.cmd, nd.exited = cmd, exited
	if err := waitAMQP(ctx, nd); err != nil {
		return fmt.Errorf("%w; its output:\n%s", err, tail(filepath.Join(nd.dir, "server.out"), 2000))
	}
	fmt.Fprintf(c.out, "rmqcluster: %s up on AMQP port %d\n", nd.Name, nd.AMQPPort)
	return nil
}

// Kill kills node i's Erlang VM with SIGKILL, as a crashed machine would
// stop it, and waits for its script to exit. Killing a node that is not
// running does nothing.
func (c *Cluster) Kill(i int) error {
	if i < 0 || i >= len(c.nodes) {
		return fmt.Errorf("rmqcluster: no node %d in a cluster of %d", i, len(c.nodes))
	}
	return c.kill(c.nodes[i])
}

func (c *Cluster) kill(nd *Node) error {
	if nd.cmd == nil {
		return nil
	}
	if b, err := os.ReadFile(filepath.Join(nd.dir, "beam.pid")); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 1 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	// The VM may run in another session (the script can switch users),
	// so the process group holds only the scripts; kill them too.
	_ = syscall.Kill(-nd.cmd.Process.Pid, syscall.SIGKILL)
	t := time.NewTimer(killTimeout)
	defer t.Stop()
	select {
	case <-nd.exited:
	case <-t.C:
		return fmt.Errorf("rmqcluster: %s's script did not exit within %s of SIGKILL", nd.Name, killTimeout)
	}
	_ = os.Remove(filepath.Join(nd.dir, "beam.pid"))
	nd.cmd = nil
	return nil
}

// Stop kills every node that still runs and waits until none is
// registered with epmd; the directory stays, for its logs. It may be
// called more than once.
func (c *Cluster) Stop() error {
	var errs []error
	for _, nd := range c.nodes {
		errs = append(errs, c.kill(nd))
	}
	if _, err := exec.LookPath("epmd"); err == nil {
		errs = append(errs, c.waitUnregistered())
	}
	return errors.Join(errs...)
}

// waitUnregistered polls epmd until it no longer lists any of the nodes;
// epmd notices a dead VM's socket at once, so this is brief.
func (c *Cluster) waitUnregistered() error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	deadline := time.NewTimer(epmdTimeout)
	defer deadline.Stop()
	for {
		out, _ := exec.Command("epmd", "-names").Output()
		left := ""
		for _, nd := range c.nodes {
			if short, _, _ := strings.Cut(nd.Name, "@"); strings.Contains(string(out), "name "+short+" ") {
				left += " " + short
			}
		}
		if left == "" {
			return nil
		}
		select {
		case <-tick.C:
		case <-deadline.C:
			return fmt.Errorf("rmqcluster: still registered with epmd after teardown:%s", left)
		}
	}
}

// Close stops the cluster and removes its directory, which it keeps (and
// names in the error) if a node would not stop.
func (c *Cluster) Close() error {
	if err := c.Stop(); err != nil {
		return fmt.Errorf("%w (keeping %s)", err, c.dir)
	}
	return os.RemoveAll(c.dir)
}

// ctl runs rabbitmqctl against nd and returns its output.
func (c *Cluster) ctl(ctx context.Context, nd *Node, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "rabbitmqctl", append([]string{"-n", nd.Name}, args...)...)
	cmd.Env = nd.env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("rmqcluster: rabbitmqctl -n %s %s: %w\n%s", nd.Name, strings.Join(args, " "), err, out.String())
	}
	return out.String(), nil
}

// waitAMQP polls nd's AMQP port until it accepts a connection (RabbitMQ
// opens its listeners last when it boots), its script exits, or ctx ends.
func waitAMQP(ctx context.Context, nd *Node) error {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(nd.AMQPPort))
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			conn.Close()
			return nil
		}
		select {
		case <-nd.exited:
			return fmt.Errorf("rmqcluster: %s exited while starting", nd.Name)
		case <-ctx.Done():
			return fmt.Errorf("rmqcluster: %s did not open %s: %w", nd.Name, addr, ctx.Err())
		case <-tick.C:
		}
	}
}

// freePorts returns n distinct ports free on loopback now. Another
// process could take one before its node does; that node's start then
// fails.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// tail returns the last max bytes of a file, for error messages.
func tail(path string, max int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return string(b)
}

// dirPattern names a cluster's directory; ownerFile in it holds the pid of
// the process that started the cluster.
const (
	dirPattern = "harbinger-rmqcluster-*"
	ownerFile  = "owner.pid"
)

// ReapOrphans tears down the clusters under parent whose owner died
// without tearing them down (a test binary killed by its timeout, a
// harness killed with SIGKILL): the Erlang VMs run in sessions of their
// own, often as another user, so nothing else stops them, and they go on
// taking CPU from whatever runs next. It kills each such node's VM (named
// by its beam.pid, and only if that process's environment or command line
// names the cluster's directory, so a reused pid is left alone), removes
// the directory, and returns what it did, one line each. Start calls it
// on its parent directory.
func ReapOrphans(parent string) []string {
	dirs, _ := filepath.Glob(filepath.Join(parent, dirPattern))
	var did []string
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			continue // not started by this package, or still being prepared
		}
		owner, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || owner < 1 || alive(owner) {
			continue
		}
		pids, _ := filepath.Glob(filepath.Join(dir, "n*", "beam.pid"))
		killed := 0
		for _, pf := range pids {
			b, err := os.ReadFile(pf)
			if err != nil {
				continue
			}
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil || pid < 2 || !mentions(pid, dir) {
				continue
			}
			if syscall.Kill(pid, syscall.SIGKILL) == nil {
				killed++
			}
		}
		if err := os.RemoveAll(dir); err != nil {
			did = append(did, fmt.Sprintf("orphaned cluster %s (owner %d gone): killed %d nodes, could not remove it: %v", dir, owner, killed, err))
			continue
		}
		did = append(did, fmt.Sprintf("orphaned cluster %s (owner %d gone): killed %d nodes, removed it", dir, owner, killed))
	}
	return did
}

// alive reports whether process pid exists (as far as this process may
// know: one it may not signal counts as alive).
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// mentions reports whether process pid's environment or command line
// contains s.
func mentions(pid int, s string) bool {
	for _, f := range []string{"environ", "cmdline"} {
		if b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), f)); err == nil && bytes.Contains(b, []byte(s)) {
			return true
		}
	}
	return false
}
