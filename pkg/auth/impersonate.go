package auth

import (
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/identity"
)

// Lower-case impersonation header names; requests are matched against them
// ASCII case-insensitively, whatever canonicalisation the server applied.
const (
	impersonatePrefix      = "impersonate-"
	impersonateUserHeader  = "impersonate-user"
	impersonateGroupHeader = "impersonate-group"
	impersonateUIDHeader   = "impersonate-uid"
	impersonateExtraPrefix = "impersonate-extra-"
)

const (
	serviceAccountUsernamePrefix = "system:serviceaccount:"
	allServiceAccountsGroup      = "system:serviceaccounts"
	authenticationGroup          = "authentication.k8s.io"
)

// maxImpersonationChecks bounds the SubjectAccessReviews one request can
// cost; kube-apiserver has no such bound but authorizes in process.
const maxImpersonationChecks = 256

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

// impersonation is what a request's Impersonate-* headers ask for.
type impersonation struct {
	user   string
	uid    string
	groups []string
	// extra maps unescaped, lower-cased keys to values, as kube-apiserver
	// reads Impersonate-Extra-<key>.
	extra map[string][]string
}

// parseImpersonation reads Impersonate-* headers with kube-apiserver's
// semantics (legacy impersonation filter): nil when no user is impersonated,
// 400 when groups, a UID or extras come without a user. It is stricter in
// one respect: several Impersonate-User or Impersonate-Uid values are
// rejected rather than resolved to the first.
func parseImpersonation(h http.Header) (*impersonation, error) {
	var users, uids, groups []string
	var extra map[string][]string
	hasExtra := false
	// Sorted so that differently cased duplicates merge in a stable order.
	for _, name := range slices.Sorted(maps.Keys(h)) {
		if !hasPrefixFoldASCII(name, impersonatePrefix) {
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
		case strings.HasPrefix(lower, impersonateExtraPrefix):
			hasExtra = true
			if len(values) == 0 {
				continue
			}
			key := unescapeExtraKey(lower[len(impersonateExtraPrefix):])
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
	imp := &impersonation{groups: groups, extra: extra}
	if len(users) == 1 {
		imp.user = users[0]
	}
	if len(uids) == 1 {
		imp.uid = uids[0]
	}
	if imp.user == "" {
		if len(groups) > 0 || hasExtra || imp.uid != "" {
			return nil, apierrors.NewBadRequest(fmt.Sprintf(
				"requested impersonation of groups %q, uid %q or user extras without impersonating a user", groups, imp.uid))
		}
		return nil, nil
	}
	n := 1 + len(groups)
	for _, v := range extra {
		n += len(v)
	}
	if imp.uid != "" {
		n++
	}
	if n > maxImpersonationChecks {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("too many impersonated items (%d, at most %d)", n, maxImpersonationChecks))
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

// key identifies the requested impersonation in cache keys; "" for none.
func (imp *impersonation) key() string {
	if imp == nil {
		return ""
	}
	fields := []string{imp.user, imp.uid, fmt.Sprint(len(imp.groups))}
	fields = append(fields, imp.groups...)
	for _, k := range slices.Sorted(maps.Keys(imp.extra)) {
		fields = append(fields, k, fmt.Sprint(len(imp.extra[k])))
		fields = append(fields, imp.extra[k]...)
	}
	return cacheKey("impersonation", fields...)
}

// checks lists the "impersonate" authorizations the requestor needs, in
// kube-apiserver's order: the user (or service account), each group, each
// extra value (subresource = key), then the UID.
func (imp *impersonation) checks() []*authorizationv1.ResourceAttributes {
	var out []*authorizationv1.ResourceAttributes
	if ns, name, ok := splitServiceAccount(imp.user); ok {
		out = append(out, &authorizationv1.ResourceAttributes{Verb: "impersonate", Resource: "serviceaccounts", Namespace: ns, Name: name})
	} else {
		out = append(out, &authorizationv1.ResourceAttributes{Verb: "impersonate", Resource: "users", Name: imp.user})
	}
	for _, g := range imp.groups {
		out = append(out, &authorizationv1.ResourceAttributes{Verb: "impersonate", Resource: "groups", Name: g})
	}
	for _, k := range slices.Sorted(maps.Keys(imp.extra)) {
		for _, v := range imp.extra[k] {
			out = append(out, &authorizationv1.ResourceAttributes{
				Verb: "impersonate", Group: authenticationGroup, Version: "v1",
				Resource: "userextras", Subresource: k, Name: v,
			})
		}
	}
	if imp.uid != "" {
		out = append(out, &authorizationv1.ResourceAttributes{
			Verb: "impersonate", Group: authenticationGroup, Version: "v1", Resource: "uids", Name: imp.uid,
		})
	}
	return out
}

// caller is the identity kube-apiserver would switch to once every check
// passed: a service account gets its fixed groups unless groups were given,
// and system:authenticated (system:unauthenticated for system:anonymous) is
// added unless either built-in group was requested.
func (imp *impersonation) caller() identity.Caller {
	c := identity.Caller{Name: imp.user, UID: imp.uid}
	if ns, _, ok := splitServiceAccount(imp.user); ok && len(imp.groups) == 0 {
		c.Groups = []string{allServiceAccountsGroup, allServiceAccountsGroup + ":" + ns}
	}
	c.Groups = append(c.Groups, imp.groups...)
	if imp.user == userAnonymous {
		if !slices.Contains(c.Groups, groupUnauthenticated) {
			c.Groups = append(c.Groups, groupUnauthenticated)
		}
	} else {
		c.Groups = withAuthenticatedGroup(c.Groups)
	}
	if len(imp.extra) > 0 {
		c.Extra = make(map[string][]string, len(imp.extra))
		for k, v := range imp.extra {
			c.Extra[k] = slices.Clone(v)
		}
	}
	return c
}

// splitServiceAccount is kube-apiserver's serviceaccount.SplitUsername.
func splitServiceAccount(user string) (namespace, name string, ok bool) {
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
