package redfish

import "time"

// SetNow replaces the client's clock (what a bound identity's age is
// measured on).
func SetNow(c *Client, now func() time.Time) { c.now = now }

// KnownIdentityMaxAge is knownIdentityMaxAge, for the tests outside the
// package.
const KnownIdentityMaxAge = knownIdentityMaxAge

// StreamClient is the operations client a Stream discovers with (its
// kept-alive connection is not the stream's).
func StreamClient(s *Stream) *Client { return s.client }
