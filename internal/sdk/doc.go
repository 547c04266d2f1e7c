// Package sdk holds the tests of the Go SDK modules (client/ and
// rabbitmq/) that need this module's broker, server or rules: the SDK's
// modules require only the API module, so they cannot import them. The
// examples here run the client against an in-process broker and check
// their output; the agreement tests check that the rules the SDKs keep a
// copy of (nack reasons, TLS hints, key names, the hold bound) match the
// broker's.
package sdk
