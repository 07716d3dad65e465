// Package redfishclients holds the conformance tests that run independent
// Go Redfish clients against bmcfence's Redfish mock: gofish as its users
// get it today (v0.23.0, package schemas), and, in the bmclib
// subdirectory, bmclib v2.3.5 with the gofish v0.20.0 it requires (the two
// gofish versions cannot share a module). They are modules of their own so
// that the product's go.mod carries neither client nor their unmaintained
// dependencies; make test runs them (hack/test.sh).
package redfishclients
