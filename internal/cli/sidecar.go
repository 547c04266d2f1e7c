package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/harbinger-mq/harbinger/internal/auth"
	"github.com/harbinger-mq/harbinger/internal/server"
	"github.com/harbinger-mq/harbinger/internal/sidecar"
	"github.com/harbinger-mq/harbinger/rabbitmq"
)

func init() {
	register("sidecar", "serve the predictor to RabbitMQ publishers and share learning through RabbitMQ", runSidecar)
}

// amqpURLEnv names the environment variable that overrides the default
// RabbitMQ URL.
const amqpURLEnv = "HARBINGER_AMQP_URL"

// sidecarEnvPrefix starts the environment variable of every sidecar flag:
// its own, not serve's, so that a sidecar on a host whose environment is
// set for serve does not take serve's addresses, certificates or tokens.
const sidecarEnvPrefix = "HARBINGER_SIDECAR_"

func runSidecar(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runSidecarEnv(ctx, args, os.Getenv, stdout, stderr)
}

// serveSettingsInEnv lists the serve-style variables (HARBINGER_<FLAG>) set
// in the environment for flags of fs, which the sidecar does not read; the
// sidecar names them once at start so that a setting moved from serve's
// names is not lost in silence. HARBINGER_AMQP_URL is the sidecar's own
// default for -amqp-url and not listed.
func serveSettingsInEnv(fs *flag.FlagSet, getenv func(string) string) []string {
	var out []string
	fs.VisitAll(func(f *flag.Flag) {
		name := envName(f.Name)
		if name != amqpURLEnv && getenv(name) != "" {
			out = append(out, name)
		}
	})
	return out
}

// runSidecarEnv is runSidecar with the environment read through getenv.
func runSidecarEnv(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlags("sidecar", "sidecar [-config FILE] [-grpc-addr ADDR] [-http-addr ADDR|off] [-amqp-url URL[,URL...]|-] [-exchange NAME] [-max-priority N] [-tiers N] [-snapshot-every D] [-hold] [-report-every D] [-backlog-expiry D] [-tls-cert FILE -tls-key FILE [-tls-client-ca FILE]] [-tokens FILE] [-insecure] [-log-level L] [-log-format F]", stderr)
	defURL := getenv(amqpURLEnv)
	if defURL == "" {
		defURL = sidecar.DefaultAMQPURL
	}
	listen := fs.String("grpc-addr", sidecar.DefaultListen, "gRPC address of the Predictor service (as serve's -grpc-addr)")
	fs.StringVar(listen, "listen", sidecar.DefaultListen, "old name of -grpc-addr")
	httpAddr := fs.String("http-addr", sidecar.DefaultHTTP, `metrics address (/metrics, /healthz); "off" disables (as serve's -http-addr)`)
	fs.StringVar(httpAddr, "http", sidecar.DefaultHTTP, "old name of -http-addr")
	logLevel := fs.String("log-level", DefaultLogLevel, "debug, info, warn or error")
	logFormat := fs.String("log-format", DefaultLogFormat, "text or json")
	amqpURL := fs.String("amqp-url", defURL, `RabbitMQ URL for shared learning (default from `+amqpURLEnv+`); several, comma-separated, name a cluster's nodes: the sidecar uses the first it reaches and moves on when it loses one; "-" disables sharing`)
	exchange := fs.String("exchange", sidecar.DefaultExchange, "fanout exchange of observations; snapshots use NAME"+".snapshots")
	maxPriority := fs.Uint("max-priority", rabbitmq.DefaultMaxPriority, "x-max-priority of the queues; long messages get this AMQP priority, the tiers share those below it")
	tiers := fs.Int("tiers", rabbitmq.DefaultTiers, "number of tiers")
	snapshotEvery := fs.Duration("snapshot-every", sidecar.DefaultSnapshotEvery, "interval between snapshots for late-starting sidecars")
	hold := fs.Bool("hold", false, "track queue backlogs and hold long messages; with sharing on, the fleet's sidecars combine their per-queue totals")
	reportEvery := fs.Duration("report-every", sidecar.DefaultReportEvery, "with -hold: interval between this sidecar's backlog reports to the fleet")
	backlogExpiry := fs.Duration("backlog-expiry", sidecar.DefaultBacklogExpiry, "with -hold: how long a peer's backlog totals count after its latest report")
	tlsCert := fs.String("tls-cert", "", "PEM certificate the gRPC port serves TLS with (with -tls-key), as serve's")
	tlsKey := fs.String("tls-key", "", "PEM private key of -tls-cert")
	tlsClientCA := fs.String("tls-client-ca", "", "PEM CA whose client certificates are required (mutual TLS)")
	tokensFile := fs.String("tokens", "", "token file: every Predictor call then asks for a token (publish to predict, consume to observe); read once at start (no SIGHUP reload: SIGHUP stops the sidecar)")
	insecureFlag := fs.Bool("insecure", false, "allow the gRPC port beyond loopback without TLS and auth (the metrics port is never checked: it serves reads only, without TLS or tokens)")
	configEnv := envNameWith(sidecarEnvPrefix, "config")
	configPath := fs.String("config", getenv(configEnv), "YAML file of settings, keys as the flags' names (env "+configEnv+"); every flag also reads "+sidecarEnvPrefix+"<FLAG>, e.g. "+envNameWith(sidecarEnvPrefix, "grpc-addr")+" (not serve's HARBINGER_<FLAG>); precedence: flag, environment, file, default")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := applyEnvAndFile(fs, sidecarEnvPrefix, getenv, *configPath); err != nil {
		return err
	}
	ignored := serveSettingsInEnv(fs, getenv)
	exposure := ServeConfig{GRPCAddr: *listen, HTTPAddr: "off", TLSCert: *tlsCert, TLSKey: *tlsKey, TLSClientCA: *tlsClientCA, Tokens: *tokensFile, Insecure: *insecureFlag}
	if (*tlsCert == "") != (*tlsKey == "") {
		return errors.New("TLS needs both -tls-cert and -tls-key")
	}
	if *tlsClientCA != "" && *tlsCert == "" {
		return errors.New("-tls-client-ca (mutual TLS) needs -tls-cert and -tls-key too")
	}
	if err := exposure.checkExposure(); err != nil {
		return err
	}
	var gopts []grpc.ServerOption
	if *tlsCert != "" {
		certs, err := auth.LoadServerTLS(*tlsCert, *tlsKey, *tlsClientCA)
		if err != nil {
			return err
		}
		tc, err := certs.Config("h2")
		if err != nil {
			return err
		}
		gopts = append(gopts, grpc.Creds(credentials.NewTLS(tc)))
	}
	if *tokensFile != "" {
		tokens, err := auth.LoadTokens(*tokensFile)
		if err != nil {
			return err
		}
		gopts = append(gopts, server.AuthOptions(tokens)...)
	}
	gopts = append(gopts, server.UTF8Options()...)
	gopts = append(gopts, server.ConnOptions(server.ConnConfig{})...)
	if *maxPriority < 1 || *maxPriority > 255 {
		return fmt.Errorf("--max-priority must be 1 to 255, got %d", *maxPriority)
	}
	if *snapshotEvery <= 0 {
		return fmt.Errorf("--snapshot-every must be positive, got %v", *snapshotEvery)
	}
	if *reportEvery <= 0 || *backlogExpiry < 2**reportEvery {
		return fmt.Errorf("--report-every must be positive and --backlog-expiry at least twice it, got %v and %v", *reportEvery, *backlogExpiry)
	}
	if *httpAddr == "off" {
		*httpAddr = "-"
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("-log-level %q: want debug, info, warn or error", *logLevel)
	}
	var h slog.Handler
	switch *logFormat {
	case "text":
		h = slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lv})
	case "json":
		h = slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: lv})
	default:
		return fmt.Errorf("-log-format %q: want text or json", *logFormat)
	}
	log := slog.New(h)
	if len(ignored) > 0 {
		log.Info("harbinger sidecar: serve's settings in the environment are not the sidecar's; it reads "+sidecarEnvPrefix+"<FLAG>", "ignored", strings.Join(ignored, ","))
	}
	cfg := sidecar.Config{
		Listen:  *listen,
		HTTP:    *httpAddr,
		AMQPURL: *amqpURL,
		Logger:  log,

		GRPCOptions: gopts,
	}
	cfg.Predict.MaxPriority = uint8(*maxPriority)
	cfg.Predict.Tiers = *tiers
	cfg.Hold = *hold
	cfg.Share.Exchange = *exchange
	cfg.Share.SnapshotEvery = *snapshotEvery
	cfg.Share.ReportEvery = *reportEvery
	cfg.Share.BacklogExpiry = *backlogExpiry
	s, err := sidecar.Start(cfg)
	if err != nil {
		return err
	}
	holding := "off"
	if *hold {
		holding = "on"
	}
	metrics := "metrics on " + s.HTTPAddr()
	if s.HTTPAddr() == "" {
		metrics = "metrics off"
	}
	fmt.Fprintf(stdout, "harbinger sidecar: gRPC on %s, %s, id %s, holding long messages %s\n", s.Addr(), metrics, s.ID(), holding)
	log.Info("harbinger sidecar: serving", "grpc", s.Addr(), "http", s.HTTPAddr(), "id", s.ID(), "hold", *hold)
	<-ctx.Done()
	return s.Close()
}
