// Package machine models a server's power and operating system as its BMC
// sees them. It is the one power state machine behind both test peers: the
// Redfish mock (bmc/redfishmock, over HTTP) and the in-memory fake BMC
// (bmc/bmctest), so a scenario behaves the same through either.
//
// A Machine owns no goroutine and no timer: every method takes now and
// replays the transitions due up to it, so a fake clock makes every test
// exact and a thousand idle machines cost only their structs.
package machine
