package sidecar

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A RabbitMQ cluster of nodes on this machine for tests: each node is its
// own rabbitmq-server with its own node name, AMQP and distribution ports,
// config, data and log directories, joined to the first with rabbitmqctl.
// No plugins run, so no management or Prometheus port is opened. The
// nodes share a cookie: a fresh one in a home directory of the cluster's
// own, or, where the rabbitmq-server script switches to the rabbitmq user
// (a root run of the distribution package), that user's, which the
// rabbitmqctl calls then use too.

// clusterStartTimeout bounds the start of one node and each join step.
const clusterStartTimeout = 90 * time.Second

// rmqNode is one node of an rmqCluster.
type rmqNode struct {
	name     string // e.g. hb4242a@localhost
	amqpPort int
	distPort int
	dir      string
	env      []string
	cmd      *exec.Cmd // the rabbitmq-server script, in a process group of its own
	exited   chan struct{}
}

// URL is the node's AMQP URL with the default guest account (allowed from
// loopback).
func (n *rmqNode) URL() string { return fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", n.amqpPort) }

// rmqCluster is a running cluster; startRMQCluster tears it down in
// t.Cleanup.
type rmqCluster struct {
	t     testing.TB
	dir   string
	nodes []*rmqNode
}

// startRMQCluster starts n nodes and joins them into one cluster. An error
// means the cluster could not start (no rabbitmq-server, a node that did
// not boot); whatever did start is torn down already.
func startRMQCluster(t testing.TB, n int) (_ *rmqCluster, err error) {
	for _, bin := range []string{"rabbitmq-server", "rabbitmqctl"} {
		if _, err := exec.LookPath(bin); err != nil {
			return nil, fmt.Errorf("%s not found: %w", bin, err)
		}
	}
	dir, err := os.MkdirTemp("", "harbinger-rmqcluster-")
	if err != nil {
		return nil, err
	}
	c := &rmqCluster{t: t, dir: dir}
	t.Cleanup(c.teardown)
	// The node scripts may run as the rabbitmq user; let them write here.
	if err := os.Chmod(dir, 0o777); err != nil {
		return nil, err
	}
	home := filepath.Join(dir, "home")
	if err := os.Mkdir(home, 0o700); err != nil {
		return nil, err
	}
	cookie := make([]byte, 16)
	_, _ = rand.Read(cookie)
	if err := os.WriteFile(filepath.Join(home, ".erlang.cookie"), []byte(strings.ToUpper(hex.EncodeToString(cookie))), 0o400); err != nil {
		return nil, err
	}
	// An empty environment file, so that a machine-wide rabbitmq-env.conf
	// (which may set the node name or ports) does not apply.
	envFile := filepath.Join(dir, "rabbitmq-env.conf")
	if err := os.WriteFile(envFile, nil, 0o644); err != nil {
		return nil, err
	}
	id := make([]byte, 3)
	_, _ = rand.Read(id)
	ports, err := freePorts(2 * n)
	if err != nil {
		return nil, err
	}
	for i := range n {
		nd := &rmqNode{
			name:     fmt.Sprintf("hb%s%d@localhost", hex.EncodeToString(id), i+1),
			amqpPort: ports[2*i], distPort: ports[2*i+1],
			dir: filepath.Join(dir, fmt.Sprintf("n%d", i+1)),
		}
		if err := os.Mkdir(nd.dir, 0o777); err != nil {
			return nil, err
		}
		if err := os.Chmod(nd.dir, 0o777); err != nil {
			return nil, err
		}
		conf := fmt.Sprintf("listeners.tcp.1 = 127.0.0.1:%d\n", nd.amqpPort)
		if err := os.WriteFile(filepath.Join(nd.dir, "rabbitmq.conf"), []byte(conf), 0o644); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(nd.dir, "enabled_plugins"), []byte("[].\n"), 0o666); err != nil {
			return nil, err
		}
		nd.env = append(os.Environ(),
			"HOME="+home,
			"RABBITMQ_NODENAME="+nd.name,
			"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
			"RABBITMQ_NODE_PORT="+strconv.Itoa(nd.amqpPort),
			"RABBITMQ_DIST_PORT="+strconv.Itoa(nd.distPort),
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
	ctx, cancel := context.WithTimeout(context.Background(), clusterStartTimeout)
	defer cancel()
	errs := make(chan error, n)
	for _, nd := range c.nodes {
		go func() { errs <- c.boot(ctx, nd) }()
	}
	for range n {
		if e := <-errs; e != nil && err == nil {
			err = e
		}
	}
	if err != nil {
		return nil, err
	}
	for _, nd := range c.nodes[1:] {
		for _, step := range [][]string{{"stop_app"}, {"join_cluster", c.nodes[0].name}, {"start_app"}} {
			if err := c.ctl(ctx, nd, step...); err != nil {
				return nil, err
			}
		}
		if err := waitAMQP(ctx, nd); err != nil {
			return nil, err
		}
	}
	out, err := c.ctlOutput(ctx, c.nodes[0], "cluster_status")
	if err != nil {
		return nil, err
	}
	for _, nd := range c.nodes {
		if !strings.Contains(out, nd.name) {
			return nil, fmt.Errorf("rmqcluster: %s is not in the cluster status:\n%s", nd.name, out)
		}
	}
	return c, nil
}

// boot starts nd's rabbitmq-server and waits until it accepts AMQP
// connections.
func (c *rmqCluster) boot(ctx context.Context, nd *rmqNode) error {
	logf, err := os.OpenFile(filepath.Join(nd.dir, "server.out"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o666)
	if err != nil {
		return err
	}
	cmd := exec.Command("rabbitmq-server")
	cmd.Env, cmd.Stdout, cmd.Stderr = nd.env, logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("rmqcluster: start %s: %w", nd.name, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(exited) }()
	nd.cmd, nd.exited = cmd, exited
	if err := waitAMQP(ctx, nd); err != nil {
		return fmt.Errorf("%w; its output:\n%s", err, tail(filepath.Join(nd.dir, "server.out"), 2000))
	}
	return nil
}

// Kill kills node i's Erlang VM with SIGKILL, as a crashed machine would
// stop it, and waits for its script to exit.
func (c *rmqCluster) Kill(i int) {
	c.kill(c.nodes[i])
}

func (c *rmqCluster) kill(nd *rmqNode) {
	if nd.cmd == nil {
		return
	}
	if b, err := os.ReadFile(filepath.Join(nd.dir, "beam.pid")); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 1 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	// The VM may run in another session (the script can switch users),
	// so the process group holds only the scripts; kill them too.
	_ = syscall.Kill(-nd.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-nd.exited:
	case <-time.After(30 * time.Second):
		c.t.Errorf("rmqcluster: %s's script did not exit after SIGKILL", nd.name)
	}
	_ = os.Remove(filepath.Join(nd.dir, "beam.pid"))
	nd.cmd = nil
}

// teardown kills every node, checks that none is still registered with
// epmd, and removes the cluster's directory.
func (c *rmqCluster) teardown() {
	for _, nd := range c.nodes {
		c.kill(nd)
	}
	if _, err := exec.LookPath("epmd"); err == nil {
		deadline := time.Now().Add(10 * time.Second)
		for {
			out, _ := exec.Command("epmd", "-names").Output()
			left := ""
			for _, nd := range c.nodes {
				if short, _, _ := strings.Cut(nd.name, "@"); strings.Contains(string(out), "name "+short+" ") {
					left += " " + short
				}
			}
			if left == "" {
				break
			}
			if time.Now().After(deadline) {
				c.t.Errorf("rmqcluster: still registered with epmd after teardown:%s", left)
				break
			}
			time.Sleep(50 * time.Millisecond) // epmd notices a dead VM's socket at once; poll briefly
		}
	}
	if c.t.Failed() {
		c.t.Logf("rmqcluster: keeping %s for its logs", c.dir)
		return
	}
	_ = os.RemoveAll(c.dir)
}

// ctl runs rabbitmqctl against nd.
func (c *rmqCluster) ctl(ctx context.Context, nd *rmqNode, args ...string) error {
	_, err := c.ctlOutput(ctx, nd, args...)
	return err
}

func (c *rmqCluster) ctlOutput(ctx context.Context, nd *rmqNode, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "rabbitmqctl", append([]string{"-n", nd.name}, args...)...)
	cmd.Env = nd.env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("rmqcluster: rabbitmqctl -n %s %s: %w\n%s", nd.name, strings.Join(args, " "), err, out.String())
	}
	return out.String(), nil
}

// waitAMQP polls nd's AMQP port until it accepts a connection (RabbitMQ
// opens its listeners last when it boots), its script exits, or ctx ends.
func waitAMQP(ctx context.Context, nd *rmqNode) error {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(nd.amqpPort))
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
			return fmt.Errorf("rmqcluster: %s exited while starting", nd.name)
		case <-ctx.Done():
			return fmt.Errorf("rmqcluster: %s did not open %s: %w", nd.name, addr, ctx.Err())
		case <-tick.C:
		}
	}
}

// freePorts returns n distinct ports free on loopback now.
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

// errClusterGate is why the cluster tests skip.
var errClusterGate = errors.New("set HARBINGER_RABBITMQ_CLUSTER=1 to start a three-node RabbitMQ cluster on this machine (needs rabbitmq-server and rabbitmqctl)")
