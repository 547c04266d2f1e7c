//go:build !race

package server

// stressMessages is the load of TestManyProducersWorkersWithKills.
const stressMessages = 100_000
