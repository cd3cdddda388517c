package identity

import (
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
)

// Built-in users and groups kube-apiserver adds or recognises.
const (
	GroupAuthenticated   = "system:authenticated"
	GroupUnauthenticated = "system:unauthenticated"
	UserAnonymous        = "system:anonymous"

	serviceAccountUsernamePrefix = "system:serviceaccount:"
	allServiceAccountsGroup      = "system:serviceaccounts"
)

// Lower-case impersonation header names; requests are matched against them
// ASCII case-insensitively, whatever canonicalisation the server applied.
const (
	impersonatePrefixLower = "impersonate-"
	impersonateUserHeader  = "impersonate-user"
	impersonateGroupHeader = "impersonate-group"
	impersonateUIDHeader   = "impersonate-uid"
	impersonateExtraLower  = "impersonate-extra-"
)

// MaxImpersonatedItems bounds the user, UID, groups and extra values one
// request may impersonate: each costs authorize mode a SubjectAccessReview
// (kube-apiserver has no such bound but authorizes in process).
const MaxImpersonatedItems = 256

// hasPrefixFoldASCII reports whether s starts with the lower-case ASCII
// prefix, ignoring ASCII case only: HTTP header names are ASCII tokens, and
// Go canonicalises them with ASCII rules, so that is the equivalence that
// decides what an upstream server sees.
func hasPrefixFoldASCII(s, prefix string) bool {
	if len(s) < len(prefix) {
		return false
	}
	for i := 0; i < len(prefix); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != prefix[i] {
			return false
		}
	}
	return true
}

// Impersonation is what a request's Impersonate-* headers ask for.
type Impersonation struct {
	User   string
	UID    string
	Groups []string
	// Extra maps unescaped, lower-cased keys to values, as kube-apiserver
	// reads Impersonate-Extra-<key>.
	Extra map[string][]string
}

// ParseImpersonation reads Impersonate-* headers with kube-apiserver's
// semantics (legacy impersonation filter): nil when no user is impersonated,
// 400 when groups, a UID or extras come without a user. It is stricter in
// one respect: several Impersonate-User or Impersonate-Uid values are
// rejected rather than resolved to the first.
func ParseImpersonation(h http.Header) (*Impersonation, error) {
	var users, uids, groups []string
	var extra map[string][]string
	hasExtra := false
	// Sorted so that differently cased duplicates merge in a stable order.
	for _, name := range slices.Sorted(maps.Keys(h)) {
		if !hasPrefixFoldASCII(name, impersonatePrefixLower) {
			continue
		}
		values := h[name]
		switch lower := strings.ToLower(name); {
		case lower == impersonateUserHeader:
			users = append(users, values...)
		case lower == impersonateUIDHeader:
			uids = append(uids, values...)
		case lower == impersonateGroupHeader:
			groups = append(groups, values...)
		case strings.HasPrefix(lower, impersonateExtraLower):
			hasExtra = true
			if len(values) == 0 {
				continue
			}
			key := unescapeExtraKey(lower[len(impersonateExtraLower):])
			if extra == nil {
				extra = map[string][]string{}
			}
			extra[key] = append(extra[key], values...)
		}
	}
	if len(users) > 1 {
		return nil, apierrors.NewBadRequest("multiple Impersonate-User values")
	}
	if len(uids) > 1 {
		return nil, apierrors.NewBadRequest("multiple Impersonate-Uid values")
	}
	imp := &Impersonation{Groups: groups, Extra: extra}
	if len(users) == 1 {
		imp.User = users[0]
	}
	if len(uids) == 1 {
		imp.UID = uids[0]
	}
	if imp.User == "" {
		if len(groups) > 0 || hasExtra || imp.UID != "" {
			return nil, apierrors.NewBadRequest(fmt.Sprintf(
				"requested impersonation of groups %q, uid %q or user extras without impersonating a user", groups, imp.UID))
		}
		return nil, nil
	}
	n := 1 + len(groups)
	for _, v := range extra {
		n += len(v)
	}
	if imp.UID != "" {
		n++
	}
	if n > MaxImpersonatedItems {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("too many impersonated items (%d, at most %d)", n, MaxImpersonatedItems))
	}
	return imp, nil
}

// unescapeExtraKey decodes %-escapes as kube-apiserver does, keeping a
// malformed key as sent.
func unescapeExtraKey(encoded string) string {
	key, err := url.PathUnescape(encoded)
	if err != nil {
		return encoded
	}
	return key
}

// Caller is the identity kube-apiserver would switch to once every check
// passed: a service account gets its fixed groups unless groups were given,
// and system:authenticated (system:unauthenticated for system:anonymous) is
// added unless either built-in group was requested.
func (imp *Impersonation) Caller() Caller {
	c := Caller{Name: imp.User, UID: imp.UID}
	if ns, _, ok := SplitServiceAccount(imp.User); ok && len(imp.Groups) == 0 {
		c.Groups = []string{allServiceAccountsGroup, allServiceAccountsGroup + ":" + ns}
	}
	c.Groups = append(c.Groups, imp.Groups...)
	if imp.User == UserAnonymous {
		if !slices.Contains(c.Groups, GroupUnauthenticated) {
			c.Groups = append(c.Groups, GroupUnauthenticated)
		}
	} else {
		c.Groups = WithAuthenticatedGroup(c.Groups)
	}
	if len(imp.Extra) > 0 {
		c.Extra = make(map[string][]string, len(imp.Extra))
		for k, v := range imp.Extra {
			c.Extra[k] = slices.Clone(v)
		}
	}
	return c
}

// SplitServiceAccount is kube-apiserver's serviceaccount.SplitUsername.
func SplitServiceAccount(user string) (namespace, name string, ok bool) {
	rest, found := strings.CutPrefix(user, serviceAccountUsernamePrefix)
	if !found {
		return "", "", false
	}
	parts := strings.Split(rest, ":")
	if len(parts) != 2 {
		return "", "", false
	}
	namespace, name = parts[0], parts[1]
	if len(apimachineryvalidation.ValidateNamespaceName(namespace, false)) != 0 ||
		len(apimachineryvalidation.ValidateServiceAccountName(name, false)) != 0 {
		return "", "", false
	}
	return namespace, name, true
}

// WithAuthenticatedGroup adds system:authenticated as kube-apiserver's
// authenticated-group adder does for every authenticated request (a caller
// already in either built-in group keeps its groups as they are).
func WithAuthenticatedGroup(groups []string) []string {
	if slices.Contains(groups, GroupAuthenticated) || slices.Contains(groups, GroupUnauthenticated) {
		return groups
	}
	return append(groups, GroupAuthenticated)
}

// Impersonated is the identity h's Impersonate-* headers ask for, as
// kube-apiserver's impersonation filter builds it (and writes it in its
// audit events' impersonatedUser: a ServiceAccount's groups, then
// system:authenticated added); nil without such headers or when they do
// not parse.
func Impersonated(h http.Header) *Caller {
	imp, err := ParseImpersonation(h)
	if err != nil || imp == nil {
		return nil
	}
	c := imp.Caller()
	return &c
}
