package bench

// Broker names of the peers' drivers (Arm.Broker), beside those of
// Harbinger's in package harness.
const (
	// RabbitMQ is a RabbitMQ the user runs: classic queues, no confirms.
	RabbitMQ = "rabbitmq"
	// RabbitQuorum is the same RabbitMQ with quorum queues, persistent
	// messages and publisher confirms.
	RabbitQuorum = "rabbitmq-quorum"
	// RabbitSidecars is the same RabbitMQ with the predictive layout run
	// through `harbinger sidecar` processes the harness starts per run
	// (SidecarDriver).
	RabbitSidecars = "rabbitmq-sidecars"
	// Redis is a Redis the user runs.
	Redis = "redis"
	// RedisAOF is a redis-server the harness starts per run with
	// appendfsync always.
	RedisAOF = "redis-aof"
	// NATS is a nats-server with JetStream the harness starts per run.
	NATS = "nats-jetstream"
	// NATSMemory is the same with memory-storage streams: nothing is
	// written to disk, as nothing is by Harbinger's --memory.
	NATSMemory = "nats-jetstream-memory"
)
