// Package identitytest holds what tests of several packages check identity
// headers against, decided independently of package identity.
package identitytest

import (
	"net/http"
	"strings"
)

// IsIdentityHeader decides independently of identity.StripHeaders, by
// ASCII lower-casing and by what Go canonicalises the name to upstream.
func IsIdentityHeader(name string) bool {
	lower := strings.ToLower(name)
	canonical := http.CanonicalHeaderKey(name)
	return lower == "authorization" || strings.HasPrefix(lower, "impersonate-") ||
		canonical == "Authorization" || strings.HasPrefix(canonical, "Impersonate-") ||
		strings.HasPrefix(lower, "x-remote-")
}
