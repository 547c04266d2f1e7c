// Package conformance runs one scenario against every Harbinger SDK (Go,
// Python, TypeScript), each as a producer and a worker process of its own
// against a real `harbinger serve`, and checks the same expected outcomes
// for each, same-language and mixed: the behaviour docs/sdk.md states.
// Each SDK's agent (agent/ here, sdk/python/conformance/agent.py,
// sdk/typescript/conformance/agent.ts) reads testdata/scenario.json and
// reports what it did as JSON lines.
package conformance
