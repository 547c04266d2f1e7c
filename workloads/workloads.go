// Package workloads embeds the registered workload files, so an installed
// harbinger binary runs its demo and simulator from any directory.
package workloads

import "embed"

// FS holds the YAML files of this directory.
//
//go:embed *.yaml
var FS embed.FS
