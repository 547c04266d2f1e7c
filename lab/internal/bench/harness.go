package bench

import "github.com/harbinger-mq/harbinger/internal/harness"

// The harness the product's demo uses (package harness) is this
// package's too: its driver interface, Harbinger's driver and RunArm,
// under the names the lab has always used.
type (
	Key              = harness.Key
	QueueSpec        = harness.QueueSpec
	FairSettings     = harness.FairSettings
	Message          = harness.Message
	Handler          = harness.Handler
	Driver           = harness.Driver
	Queue            = harness.Queue
	Publisher        = harness.Publisher
	Arm              = harness.Arm
	HarbingerMode    = harness.HarbingerMode
	HarbingerDriver  = harness.HarbingerDriver
	HarbingerOptions = harness.HarbingerOptions
	RunSpec          = harness.RunSpec
	RunResult        = harness.RunResult
	Progress         = harness.Progress
	CPUPerMsg        = harness.CPUPerMsg
	LogFigures       = harness.LogFigures
	BrokerProcess    = harness.BrokerProcess
	CPUSample        = harness.CPUSample
	HarbingerQueue   = harness.HarbingerQueue
)

// Names and defaults from package harness.
const (
	Harbinger           = harness.Harbinger
	HarbingerServe      = harness.HarbingerServe
	HarbingerDurable    = harness.HarbingerDurable
	BareGRPC            = harness.BareGRPC
	BareTCP             = harness.BareTCP
	PolicyFIFO          = harness.PolicyFIFO
	PolicyStatic        = harness.PolicyStatic
	PolicyPredictive    = harness.PolicyPredictive
	PolicyWeighted      = harness.PolicyWeighted
	PolicyFair          = harness.PolicyFair
	InProcess           = harness.InProcess
	ServeMemory         = harness.ServeMemory
	ServeDurable        = harness.ServeDurable
	BareServer          = harness.BareServer
	BareQueueCommand    = harness.BareQueueCommand
	DefaultDrainTimeout = harness.DefaultDrainTimeout
	ProcessStartTimeout = harness.ProcessStartTimeout
	SlowSync            = harness.SlowSync
	TurnaroundMargin    = harness.TurnaroundMargin
)

// Functions from package harness.
var (
	ErrPolicy          = harness.ErrPolicy
	NewHarbinger       = harness.NewHarbinger
	RunArm             = harness.RunArm
	StartProgress      = harness.StartProgress
	BareQueueReady     = harness.BareQueueReady
	StartProcess       = harness.StartProcess
	FSType             = harness.FSType
	IsProcess          = harness.IsProcess
	FreePort           = harness.FreePort
	FindProcess        = harness.FindProcess
	EncodeBody         = harness.EncodeBody
	DecodeBody         = harness.DecodeBody
	SampleCPU          = harness.SampleCPU
	PerMsg             = harness.PerMsg
	SleepUntil         = harness.SleepUntil
	ProcRSS            = harness.ProcRSS
	ProcStatusKB       = harness.ProcStatusKB
	DirSize            = harness.DirSize
	SummaryStats       = harness.SummaryStats
	LogFiguresBetween  = harness.LogFiguresBetween
	PreciseSleepMethod = harness.PreciseSleepMethod
)
