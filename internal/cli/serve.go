package cli

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/harbinger-mq/harbinger/internal/auth"
	"github.com/harbinger-mq/harbinger/internal/broker"
	"github.com/harbinger-mq/harbinger/internal/gcpace"
	"github.com/harbinger-mq/harbinger/internal/history"
	"github.com/harbinger-mq/harbinger/internal/predictsvc"
	"github.com/harbinger-mq/harbinger/internal/server"
	"github.com/harbinger-mq/harbinger/internal/store"
	"github.com/harbinger-mq/harbinger/internal/tracing"
	"github.com/harbinger-mq/harbinger/internal/web"
	"github.com/harbinger-mq/harbinger/rabbitmq"
)

func init() {
	register("serve", "run the broker: gRPC for jobs; HTTP for the dashboard, metrics and health", runServe)
}

// Defaults for ServeConfig.
const (
	DefaultGRPCAddr        = "127.0.0.1:7070"
	DefaultHTTPAddr        = "127.0.0.1:7071"
	DefaultShutdownTimeout = 30 * time.Second
	DefaultLogLevel        = "info"
	DefaultLogFormat       = "text"
	DefaultDataDir         = "harbinger-data"
	DefaultFsync           = "always"
)

// ServeConfig is everything "harbinger serve" runs with. Each field comes,
// in rising precedence, from its default, the config file (-config, YAML,
// keys as in the yaml tags), a HARBINGER_* environment variable, or a flag
// (see serveSettings for the names).
type ServeConfig struct {
	// GRPCAddr is where producers and workers connect.
	GRPCAddr string `yaml:"grpc_addr"`
	// HTTPAddr serves the dashboard, /metrics and /healthz; "off"
	// disables it.
	HTTPAddr string `yaml:"http_addr"`
	// ShutdownTimeout is how long in-flight jobs get to finish after SIGINT
	// or SIGTERM before they are returned to their queues.
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`
	// LogLevel is debug, info, warn or error.
	LogLevel string `yaml:"log_level"`
	// LogFormat is text or json.
	LogFormat string `yaml:"log_format"`
	// DataDir holds the write-ahead log; relative paths are from the
	// working directory. One broker at a time may use it.
	DataDir string `yaml:"data_dir"`
	// Fsync is "always" (a publish is answered once its record is fsynced)
	// or "interval=DURATION" (answered once written; fsynced at least that
	// often, so a machine crash loses at most that much, a process crash
	// nothing).
	Fsync string `yaml:"fsync"`
	// Memory keeps everything in memory: nothing survives a restart.
	Memory bool `yaml:"memory"`
	// Salvage starts on a log with a corrupt record by keeping what comes
	// before it and setting the rest aside (see docs/log.md).
	Salvage bool `yaml:"salvage"`
	// TLSCert and TLSKey are PEM files of the certificate and key both
	// ports serve TLS with; empty serves plaintext.
	TLSCert string `yaml:"tls_cert"`
	TLSKey  string `yaml:"tls_key"`
	// TLSClientCA, when set, requires clients on both ports to present a
	// certificate this CA signed (mutual TLS).
	TLSClientCA string `yaml:"tls_client_ca"`
	// Tokens is the token file (see docs/auth.md); when set, every RPC,
	// dashboard page and /metrics asks for a token with the right scope.
	// SIGHUP reloads it, and the TLS certificate with it.
	Tokens string `yaml:"tokens"`
	// Insecure allows listening beyond loopback without TLS and auth.
	Insecure bool `yaml:"insecure"`
	// CPUProfile, when set, is a file the broker writes a CPU profile of
	// its whole run to (go tool pprof reads it), closed at shutdown.
	CPUProfile string `yaml:"cpuprofile"`
	// PrometheusURL, when set, is linked from the dashboard for history.
	PrometheusURL string `yaml:"prometheus_url"`
	// OTLPEndpoint, when set, turns tracing on: each job's publish, wait
	// and run are spans, exported by OTLP/gRPC to this collector (host:port,
	// or an http:// or https:// URL; see tracing.ParseEndpoint), and its
	// trace context travels in its traceparent header. Unset, it is taken
	// from OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT;
	// "off" keeps tracing off whatever those say.
	OTLPEndpoint string `yaml:"otlp_endpoint"`
	// Broker holds the broker's limits and default queue settings.
	Broker broker.Config `yaml:"broker"`
	// Queues are declared at start, each with its settings (the keys of
	// broker.QueueConfig): made if missing, changed if they differ,
	// otherwise left alone; each outcome is logged. Queues the file does
	// not name are left as they are.
	Queues map[string]broker.QueueConfig `yaml:"queues"`
	// Schedules are declared at start the same way, by name.
	Schedules []ScheduleConfig `yaml:"schedules"`
}

// WithDefaults returns c with every zero field set to its default.
func (c ServeConfig) WithDefaults() ServeConfig {
	if c.GRPCAddr == "" {
		c.GRPCAddr = DefaultGRPCAddr
	}
	if c.HTTPAddr == "" {
		c.HTTPAddr = DefaultHTTPAddr
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
	}
	if c.LogLevel == "" {
		c.LogLevel = DefaultLogLevel
	}
	if c.LogFormat == "" {
		c.LogFormat = DefaultLogFormat
	}
	if c.DataDir == "" {
		c.DataDir = DefaultDataDir
	}
	if c.Fsync == "" {
		c.Fsync = DefaultFsync
	}
	return c
}

// Validate reports the first setting that makes no sense.
func (c ServeConfig) Validate() error {
	if _, _, err := net.SplitHostPort(c.GRPCAddr); err != nil {
		return fmt.Errorf("grpc address %q: %v", c.GRPCAddr, err)
	}
	if c.HTTPAddr != "off" {
		if _, _, err := net.SplitHostPort(c.HTTPAddr); err != nil {
			return fmt.Errorf("http address %q: %v (use \"off\" to disable)", c.HTTPAddr, err)
		}
	}
	if c.ShutdownTimeout < 0 {
		return fmt.Errorf("shutdown timeout must not be negative, got %v", c.ShutdownTimeout)
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(c.LogLevel)); err != nil {
		return fmt.Errorf("log level %q: want debug, info, warn or error", c.LogLevel)
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		return fmt.Errorf("log format %q: want text or json", c.LogFormat)
	}
	if _, err := store.ParseSyncMode(c.Fsync); err != nil {
		return err
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return errors.New("TLS needs both -tls-cert and -tls-key")
	}
	if c.TLSClientCA != "" && c.TLSCert == "" {
		return errors.New("-tls-client-ca (mutual TLS) needs -tls-cert and -tls-key too")
	}
	if err := c.checkExposure(); err != nil {
		return err
	}
	if c.tracing() {
		if _, err := tracing.ParseEndpoint(c.OTLPEndpoint); err != nil {
			return err
		}
	}
	return c.Broker.WithDefaults().Validate()
}

// tracing reports whether spans are exported (an OTLP endpoint is set).
func (c ServeConfig) tracing() bool { return c.OTLPEndpoint != "" && c.OTLPEndpoint != "off" }

// checkExposure refuses an address beyond loopback that anyone who reaches
// it could use: without TLS a token or job crosses the network in the
// clear, and without tokens or client certificates anyone may publish,
// consume and purge.
func (c ServeConfig) checkExposure() error {
	if c.Insecure {
		return nil
	}
	for _, a := range []struct{ flag, addr string }{{"-grpc-addr", c.GRPCAddr}, {"-http-addr", c.HTTPAddr}} {
		if a.addr == "off" || auth.Loopback(a.addr) {
			continue
		}
		var missing []string
		if c.TLSCert == "" {
			missing = append(missing, "TLS (-tls-cert and -tls-key)")
		}
		if c.Tokens == "" && c.TLSClientCA == "" {
			missing = append(missing, "auth (-tokens, or client certificates with -tls-client-ca)")
		}
		if len(missing) > 0 {
			return fmt.Errorf("refusing to listen on %s (%s) beyond loopback without %s: anyone who can reach it could publish, consume, purge and read every job; "+
				"set them, listen on 127.0.0.1, or pass -insecure if a network you trust stands in front", a.addr, a.flag, strings.Join(missing, " or "))
		}
	}
	return nil
}

// setting is one ServeConfig field reachable from a flag and an environment
// variable (HARBINGER_ and the flag name in upper case, dashes as
// underscores).
type setting struct {
	name, usage string
	set         func(c *ServeConfig, v string) error
}

// kind is what -h calls the value the setting takes: string, int,
// duration or bool, from the setter it was given.
func (s setting) kind() string {
	var probe ServeConfig
	switch {
	case boolSettings[s.name]:
		return "bool"
	case s.set(&probe, "1s") == nil && s.set(&probe, "1") != nil:
		return "duration"
	case s.set(&probe, "x") != nil:
		return "int"
	}
	return "string"
}

// boolSettings are given without a value: -memory.
var boolSettings = map[string]bool{"memory": true, "salvage": true, "insecure": true, "history-off": true}

func str(p func(*ServeConfig) *string) func(*ServeConfig, string) error {
	return func(c *ServeConfig, v string) error { *p(c) = v; return nil }
}

func num(p func(*ServeConfig) *int) func(*ServeConfig, string) error {
	return func(c *ServeConfig, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("want a whole number, got %q", v)
		}
		*p(c) = n
		return nil
	}
}

func boolean(p func(*ServeConfig) *bool) func(*ServeConfig, string) error {
	return func(c *ServeConfig, v string) error {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("want true or false, got %q", v)
		}
		*p(c) = b
		return nil
	}
}

func num64(p func(*ServeConfig) *int64) func(*ServeConfig, string) error {
	return func(c *ServeConfig, v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return fmt.Errorf("want a whole number, got %q", v)
		}
		*p(c) = n
		return nil
	}
}

func dur(p func(*ServeConfig) *time.Duration) func(*ServeConfig, string) error {
	return func(c *ServeConfig, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("want a duration such as 30s, got %q", v)
		}
		*p(c) = d
		return nil
	}
}

var serveSettings = []setting{
	{"grpc-addr", "gRPC listen address (default " + DefaultGRPCAddr + ")", str(func(c *ServeConfig) *string { return &c.GRPCAddr })},
	{"http-addr", "HTTP listen address for the dashboard, /metrics and /healthz, or off (default " + DefaultHTTPAddr + ")", str(func(c *ServeConfig) *string { return &c.HTTPAddr })},
	{"shutdown-timeout", "time in-flight jobs get to finish on SIGINT/SIGTERM (default 30s)", dur(func(c *ServeConfig) *time.Duration { return &c.ShutdownTimeout })},
	{"log-level", "debug, info, warn or error (default info)", str(func(c *ServeConfig) *string { return &c.LogLevel })},
	{"log-format", "text or json (default text)", str(func(c *ServeConfig) *string { return &c.LogFormat })},
	{"data-dir", "directory of the write-ahead log; one broker at a time (default " + DefaultDataDir + ", from the working directory)", str(func(c *ServeConfig) *string { return &c.DataDir })},
	{"fsync", "always: answer a publish once it is fsynced; interval=DURATION (e.g. interval=10ms): answer once written and fsync that often, so a machine crash can lose that much of what was answered (a crash of the broker alone loses nothing) (default always)", str(func(c *ServeConfig) *string { return &c.Fsync })},
	{"memory", "keep everything in memory: faster, and nothing survives a restart", boolean(func(c *ServeConfig) *bool { return &c.Memory })},
	{"salvage", "start on a log with a corrupt record: keep the records before it, set the rest aside as *.corrupt", boolean(func(c *ServeConfig) *bool { return &c.Salvage })},
	{"tls-cert", "PEM certificate both ports serve TLS with (with -tls-key)", str(func(c *ServeConfig) *string { return &c.TLSCert })},
	{"tls-key", "PEM private key of -tls-cert", str(func(c *ServeConfig) *string { return &c.TLSKey })},
	{"tls-client-ca", "PEM CA whose client certificates both ports require (mutual TLS)", str(func(c *ServeConfig) *string { return &c.TLSClientCA })},
	{"tokens", "token file: every RPC, dashboard page and /metrics then asks for a token with the right scope (harbinger token makes them; SIGHUP reloads)", str(func(c *ServeConfig) *string { return &c.Tokens })},
	{"insecure", "allow listening beyond loopback without TLS and auth (and a dashboard without tokens to answer any host name)", boolean(func(c *ServeConfig) *bool { return &c.Insecure })},
	{"cpuprofile", "write a CPU profile of the whole run to this file, closed at shutdown (for go tool pprof)", str(func(c *ServeConfig) *string { return &c.CPUProfile })},
	{"prometheus-url", "a Prometheus linked from the dashboard for longer history", str(func(c *ServeConfig) *string { return &c.PrometheusURL })},
	{"otlp-endpoint", "OpenTelemetry collector (OTLP/gRPC) to export each job's publish, wait and run spans to: host:port (TLS unless on loopback) or an http:// or https:// URL; unset, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT, else off; off turns it off (default off)", str(func(c *ServeConfig) *string { return &c.OTLPEndpoint })},
	{"max-payload", "largest payload in bytes, at most 268435456; the gRPC limits and what clients are told (GetLimits) follow from it (default 1048576)", num(func(c *ServeConfig) *int { return &c.Broker.MaxPayload })},
	{"max-bytes", "bytes the broker's jobs may hold in all, ready, delayed, in flight and dead-lettered; publishes past it get ResourceExhausted (default 1073741824)", num64(func(c *ServeConfig) *int64 { return &c.Broker.MaxBytes })},
	{"max-key-len", "longest producer or job type in bytes (default 256)", num(func(c *ServeConfig) *int { return &c.Broker.MaxKeyLen })},
	{"max-queue-name", "longest queue name in bytes (default 128)", num(func(c *ServeConfig) *int { return &c.Broker.MaxQueueName })},
	{"max-keys-per-queue", "predictor keys tracked per queue (default 100000)", num(func(c *ServeConfig) *int { return &c.Broker.MaxKeysPerQueue })},
	{"max-queues", "most queues (default 1024)", num(func(c *ServeConfig) *int { return &c.Broker.MaxQueues })},
	{"max-consumers", "most open consumers (default 10000)", num(func(c *ServeConfig) *int { return &c.Broker.MaxConsumers })},
	{"max-dead-letters", "dead letters kept per queue (default 100000)", num(func(c *ServeConfig) *int { return &c.Broker.MaxDeadLetters })},
	{"policy", "default scheduling policy: fifo, static, predictive, weighted, bounded or shadow (default " + broker.DefaultPolicy + ")", str(func(c *ServeConfig) *string { return &c.Broker.Queue.Policy })},
	{"tiers", "default number of tiers (default 3)", num(func(c *ServeConfig) *int { return &c.Broker.Queue.Tiers })},
	{"max-depth", "ready jobs per queue before publishes are refused (default 1000000)", num(func(c *ServeConfig) *int { return &c.Broker.Queue.MaxDepth })},
	{"lease", "visibility timeout of a delivery, 1s to 24h (default 30s)", dur(func(c *ServeConfig) *time.Duration { return &c.Broker.Queue.Lease })},
	{"max-attempts", "deliveries before a job is dead-lettered (default 5)", num(func(c *ServeConfig) *int { return &c.Broker.Queue.MaxAttempts })},
	{"history-max-bytes", fmt.Sprintf("memory each queue's history (its settled deliveries, for replay in the simulator) may take, %d to %d bytes (default %d)", int64(history.MinMaxBytes), int64(history.MaxMaxBytes), int64(history.DefaultMaxBytes)), num64(func(c *ServeConfig) *int64 { return &c.Broker.History.MaxBytes })},
	{"history-max-total-bytes", fmt.Sprintf("memory every queue's history may take together; past it the queue recording sheds its own oldest (default %d)", int64(history.DefaultMaxTotalBytes)), num64(func(c *ServeConfig) *int64 { return &c.Broker.History.MaxTotalBytes })},
	{"history-max-age", "how long each queue's history keeps a settled delivery (default 24h)", dur(func(c *ServeConfig) *time.Duration { return &c.Broker.History.MaxAge })},
	{"history-off", "keep no history of settled deliveries", boolean(func(c *ServeConfig) *bool { return &c.Broker.History.Off })},
	{"default-ttl", "time to live of jobs published without one; 0 is forever", dur(func(c *ServeConfig) *time.Duration { return &c.Broker.Queue.DefaultTTL })},
}

// serveEnvPrefix starts the environment variable of every serve flag.
const serveEnvPrefix = "HARBINGER_"

func envName(flag string) string { return envNameWith(serveEnvPrefix, flag) }

// loadServeConfig builds the config from defaults, file, environment and
// flags, in that order of precedence.
func loadServeConfig(args []string, getenv func(string) string, stderr io.Writer) (ServeConfig, error) {
	fs := newFlags("serve", "serve [-config FILE] [flags]   (every flag also reads HARBINGER_<FLAG>, e.g. HARBINGER_GRPC_ADDR)", stderr)
	configPath := fs.String("config", "", "YAML config file (env HARBINGER_CONFIG)")
	// Registered with their types, so that -h shows "-lease duration",
	// not "-lease value"; zero defaults, as the usages say the real ones
	// (a flag's default would otherwise hide the config file's value).
	for _, s := range serveSettings {
		switch s.kind() {
		case "bool":
			fs.Bool(s.name, false, s.usage)
		case "duration":
			fs.Duration(s.name, 0, s.usage)
		case "int":
			fs.Int64(s.name, 0, s.usage)
		default:
			fs.String(s.name, "", s.usage)
		}
	}
	if err := parse(fs, args); err != nil {
		return ServeConfig{}, err
	}
	flagged := map[string]string{}
	fs.Visit(func(f *flag.Flag) { flagged[f.Name] = f.Value.String() })
	var cfg ServeConfig
	path := *configPath
	if path == "" {
		path = getenv("HARBINGER_CONFIG")
	}
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return ServeConfig{}, err
		}
		if cfg, err = decodeServeConfig(data); err != nil {
			return ServeConfig{}, fmt.Errorf("config file %s: %v", path, err)
		}
	}
	for _, s := range serveSettings {
		if v := getenv(envName(s.name)); v != "" {
			if err := s.set(&cfg, v); err != nil {
				return ServeConfig{}, fmt.Errorf("%s: %v", envName(s.name), err)
			}
		}
	}
	for _, s := range serveSettings {
		if v, ok := flagged[s.name]; ok {
			if err := s.set(&cfg, v); err != nil {
				return ServeConfig{}, fmt.Errorf("-%s: %v", s.name, err)
			}
		}
	}
	if cfg.OTLPEndpoint == "" {
		// The OpenTelemetry SDKs' own variables, last: an endpoint set for
		// every service on the machine turns the broker's tracing on too.
		cfg.OTLPEndpoint = cmp.Or(getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"), getenv("OTEL_EXPORTER_OTLP_ENDPOINT"))
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return ServeConfig{}, err
	}
	return cfg, nil
}

// decodeServeConfig reads a config file's YAML; an unknown key is an
// error, an empty file the zero config.
func decodeServeConfig(data []byte) (ServeConfig, error) {
	var cfg ServeConfig
	if err := decodeStrict(data, &cfg); err != nil {
		return ServeConfig{}, err
	}
	return cfg, nil
}

func runServe(ctx context.Context, args []string, _, stderr io.Writer) error {
	cfg, err := loadServeConfig(args, os.Getenv, stderr)
	if err != nil {
		return err
	}
	// The collector's headroom in bytes, not as a multiple of the live
	// heap (see gcpace), unless GOGC or GOMEMLIMIT says otherwise.
	defer gcpace.Start(gcpace.Config{}).Stop()
	return serve(ctx, cfg, stderr, nil)
}

// serve runs the broker until ctx ends, then shuts down gracefully. If ready
// is not nil it receives the bound gRPC and HTTP addresses. SIGHUP reloads
// the token file and the TLS certificate.
func serve(ctx context.Context, cfg ServeConfig, logOut io.Writer, ready func(grpcAddr, httpAddr string)) error {
	var lv slog.Level
	_ = lv.UnmarshalText([]byte(cfg.LogLevel))
	var h slog.Handler = slog.NewTextHandler(logOut, &slog.HandlerOptions{Level: lv})
	if cfg.LogFormat == "json" {
		h = slog.NewJSONHandler(logOut, &slog.HandlerOptions{Level: lv})
	}
	log := slog.New(h)
	if cfg.CPUProfile != "" {
		f, err := os.Create(cfg.CPUProfile)
		if err != nil {
			return fmt.Errorf("-cpuprofile: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return fmt.Errorf("-cpuprofile: %w", err)
		}
		defer func() {
			pprof.StopCPUProfile()
			if err := f.Close(); err != nil {
				log.Error("harbinger: closing the CPU profile", "err", err)
			}
		}()
	}

	// Credentials first: a typo in them should stop the broker before it
	// opens its log.
	var tokens *auth.Tokens
	if cfg.Tokens != "" {
		t, err := auth.LoadTokens(cfg.Tokens)
		if err != nil {
			return err
		}
		tokens = t
	}
	var certs *auth.ServerTLS
	if cfg.TLSCert != "" {
		c, err := auth.LoadServerTLS(cfg.TLSCert, cfg.TLSKey, cfg.TLSClientCA)
		if err != nil {
			return err
		}
		certs = c
	}

	var tp *sdktrace.TracerProvider
	if cfg.tracing() {
		var err error
		if tp, err = startTracing(ctx, cfg.OTLPEndpoint, log); err != nil {
			return err
		}
		defer func() {
			// Last, after the broker stopped: sends what the batcher
			// still holds.
			fctx, fcancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer fcancel()
			if err := tp.Shutdown(fctx); err != nil {
				log.Warn("harbinger: tracing: flushing the last spans", "err", err)
			}
		}()
	}

	bcfg := cfg.Broker
	bcfg.Logger = log
	durability := "memory (nothing survives a restart)"
	if !cfg.Memory {
		mode, _ := store.ParseSyncMode(cfg.Fsync) // checked by Validate
		st, err := store.OpenFile(cfg.DataDir, store.FileOptions{Sync: mode, Salvage: cfg.Salvage, Logger: log})
		if err != nil {
			return err
		}
		defer func() {
			if err := st.Close(); err != nil {
				log.Error("harbinger: closing the log", "err", err)
			}
		}()
		bcfg.Store = st
		durability = "log in " + cfg.DataDir + ", fsync " + mode.String()
	}
	b, err := broker.New(bcfg)
	if err != nil {
		return err
	}
	if err := applyDeclarations(b, cfg.Queues, cfg.Schedules, log); err != nil {
		_ = b.Shutdown(context.Background())
		return err
	}
	stopSaving := func() {}
	if !cfg.Memory {
		// The queues' history as last saved (it is not job data: a crash
		// loses what was recorded since the last save).
		if n, err := b.LoadHistory(cfg.DataDir); err != nil {
			log.Warn("harbinger: history not loaded", "err", err)
		} else if n > 0 {
			log.Info("harbinger: history loaded", "entries", n)
		}
		stopSaving = b.SaveHistoryEvery(cfg.DataDir, broker.DefaultHistorySaveEvery)
		defer stopSaving() // on the ways out before the shutdown below
	}
	// The Predictor service is for jobs published to RabbitMQ: it learns
	// in a predictor of its own, as `harbinger sidecar` does, and never
	// touches the broker's queues.
	local, err := rabbitmq.NewLocal(rabbitmq.LocalConfig{})
	if err != nil {
		return err
	}
	var gopts []grpc.ServerOption
	if tokens != nil {
		// First, so that a request is authenticated before anything else
		// looks at it.
		gopts = append(gopts, server.AuthOptions(tokens)...)
	}
	gopts = append(gopts, server.ServerOptions(bcfg)...)
	if certs != nil {
		tc, err := certs.Config("h2")
		if err != nil {
			return err
		}
		gopts = append(gopts, grpc.Creds(credentials.NewTLS(tc)))
	}
	glis, err := net.Listen("tcp", cfg.GRPCAddr)
	if err != nil {
		return err
	}
	srv := server.New(b, log)
	srv.SetPredictor(predictsvc.New(local, predictsvc.Config{}))
	traces := "off"
	if tp != nil {
		srv.SetTracer(tracing.New(tp, b.Config().MaxHeaderBytes))
		traces = "otlp " + cfg.OTLPEndpoint
	}
	gs := grpc.NewServer(gopts...)
	srv.Register(gs)
	errs := make(chan error, 2)
	go func() { errs <- gs.Serve(glis) }()

	var hs *http.Server
	var dash *web.Server
	httpAddr := "off"
	if cfg.HTTPAddr != "off" {
		hlis, err := net.Listen("tcp", cfg.HTTPAddr)
		if err != nil {
			gs.Stop()
			return err
		}
		if certs != nil {
			tc, err := certs.Config("h2", "http/1.1")
			if err != nil {
				gs.Stop()
				_ = hlis.Close()
				return err
			}
			hlis = tls.NewListener(hlis, tc)
		}
		httpAddr = hlis.Addr().String()
		dash, err = web.New(web.Config{Broker: b, Tokens: tokens, SecureCookies: certs != nil, PrometheusURL: cfg.PrometheusURL, Logger: log, AnyHost: cfg.Insecure})
		if err != nil {
			gs.Stop()
			_ = hlis.Close()
			return err
		}
		defer dash.Close()
		hs = &http.Server{
			Handler:           server.NewHTTPHandler(b, server.HTTPOptions{Tokens: tokens, Dashboard: dash}),
			ReadHeaderTimeout: 10 * time.Second,
			// A request's body too: every one is a form or a small JSON
			// object, and one sent a byte at a time held its connection
			// (and a goroutine) for as long as the sender liked.
			ReadTimeout: 30 * time.Second,
			ErrorLog:    slog.NewLogLogger(h, slog.LevelWarn),
		}
		go func() {
			if err := hs.Serve(hlis); !errors.Is(err, http.ErrServerClosed) {
				errs <- err
			}
		}()
	}
	eff := b.Config()
	scheme := "http"
	if certs != nil {
		scheme = "https"
	}
	dashboard := "off"
	if httpAddr != "off" {
		dashboard = scheme + "://" + httpAddr + "/"
	}
	log.Info("harbinger: serving", "grpc", glis.Addr().String(), "http", httpAddr, "dashboard", dashboard,
		"tls", tlsMode(cfg), "auth", authMode(tokens, cfg),
		"policy", eff.Queue.Policy, "lease", eff.Queue.Lease, "max_attempts", eff.Queue.MaxAttempts,
		"max_depth", eff.Queue.MaxDepth, "max_payload", eff.MaxPayload, "max_bytes", eff.MaxBytes,
		"durability", durability, "tracing", traces)
	if cfg.Insecure && (!auth.Loopback(cfg.GRPCAddr) || (cfg.HTTPAddr != "off" && !auth.Loopback(cfg.HTTPAddr))) && (certs == nil || (tokens == nil && cfg.TLSClientCA == "")) {
		log.Warn("harbinger: -insecure: listening beyond loopback without TLS and auth; anyone who can reach these ports may publish, consume and purge")
	}
	if ready != nil {
		ready(glis.Addr().String(), httpAddr)
	}

	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	var runErr error
wait:
	for {
		select {
		case <-hup:
			reload(log, tokens, certs)
		case <-ctx.Done():
			log.Info("harbinger: shutting down", "timeout", cfg.ShutdownTimeout)
			break wait
		case runErr = <-errs:
			log.Error("harbinger: listener failed, shutting down", "err", runErr)
			break wait
		}
	}
	srv.SetNotServing()
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	if err := b.Shutdown(sctx); err != nil {
		log.Warn("harbinger: shutdown timed out; jobs still in flight were returned to their queues")
	}
	stopSaving()
	if !cfg.Memory {
		if err := b.SaveHistory(cfg.DataDir); err != nil {
			log.Warn("harbinger: history not saved", "err", err)
		}
	}
	stopped := make(chan struct{})
	go func() {
		gs.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		gs.Stop()
		<-stopped
	}
	if hs != nil {
		hctx, hcancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = hs.Shutdown(hctx)
		hcancel()
	}
	log.Info("harbinger: stopped")
	return runErr
}

// startTracing sets up the tracer provider that exports the broker's
// spans to endpoint, with OpenTelemetry's errors (a collector that cannot
// be reached) in the broker's log.
func startTracing(ctx context.Context, endpoint string, log *slog.Logger) (*sdktrace.TracerProvider, error) {
	e, err := tracing.ParseEndpoint(endpoint) // checked by Validate
	if err != nil {
		return nil, err
	}
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("harbinger: tracing", "err", err) }))
	version := ""
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "(devel)" {
		version = bi.Main.Version
	}
	return tracing.Start(ctx, e, version)
}

// reload reads the token file and the TLS certificate again (SIGHUP). A
// file that does not parse leaves what is in force as it was.
func reload(log *slog.Logger, tokens *auth.Tokens, certs *auth.ServerTLS) {
	if tokens != nil {
		if err := tokens.Reload(); err != nil {
			log.Error("harbinger: SIGHUP: the token file was not reloaded; the tokens in force stay", "err", err)
		} else {
			log.Info("harbinger: SIGHUP: tokens reloaded", "file", tokens.Path(), "tokens", tokens.Len())
		}
	}
	if certs != nil {
		if err := certs.Reload(); err != nil {
			log.Error("harbinger: SIGHUP: the TLS certificate was not reloaded; the one in force stays", "err", err)
		} else {
			log.Info("harbinger: SIGHUP: TLS certificate reloaded", "cert", certs.CertFile)
		}
	}
	if tokens == nil && certs == nil {
		log.Info("harbinger: SIGHUP: nothing to reload (no -tokens, no -tls-cert)")
	}
}

func tlsMode(cfg ServeConfig) string {
	switch {
	case cfg.TLSClientCA != "":
		return "mutual"
	case cfg.TLSCert != "":
		return "on"
	default:
		return "off"
	}
}

func authMode(tokens *auth.Tokens, cfg ServeConfig) string {
	switch {
	case tokens != nil:
		return fmt.Sprintf("tokens (%d)", tokens.Len())
	case cfg.TLSClientCA != "":
		return "client certificates"
	default:
		return "off"
	}
}
