package redfish

import "time"

// SetNow replaces the client's clock (what a bound identity's age is
// measured on).
func SetNow(c *Client, now func() time.Time) { c.now = now }

// KnownIdentityMaxAge is knownIdentityMaxAge, for the tests outside the
// package.
const KnownIdentityMaxAge = knownIdentityMaxAge
