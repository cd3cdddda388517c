package auth

import (
	"fmt"
	"maps"
	"slices"

	authorizationv1 "k8s.io/api/authorization/v1"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/identity"
)

const authenticationGroup = "authentication.k8s.io"

// maxImpersonationChecks bounds the SubjectAccessReviews one request can
// cost (identity.ParseImpersonation refuses more items).
const maxImpersonationChecks = identity.MaxImpersonatedItems

// impersonationKey identifies the requested impersonation in cache keys;
// "" for none.
func impersonationKey(imp *identity.Impersonation) string {
	if imp == nil {
		return ""
	}
	fields := []string{imp.User, imp.UID, fmt.Sprint(len(imp.Groups))}
	fields = append(fields, imp.Groups...)
	for _, k := range slices.Sorted(maps.Keys(imp.Extra)) {
		fields = append(fields, k, fmt.Sprint(len(imp.Extra[k])))
		fields = append(fields, imp.Extra[k]...)
	}
	return cacheKey("impersonation", fields...)
}

// impersonationChecks lists the "impersonate" authorizations the requestor
// needs, in kube-apiserver's order: the user (or service account), each
// group, each extra value (subresource = key), then the UID.
func impersonationChecks(imp *identity.Impersonation) []*authorizationv1.ResourceAttributes {
	var out []*authorizationv1.ResourceAttributes
	if ns, name, ok := identity.SplitServiceAccount(imp.User); ok {
		out = append(out, &authorizationv1.ResourceAttributes{Verb: "impersonate", Resource: "serviceaccounts", Namespace: ns, Name: name})
	} else {
		out = append(out, &authorizationv1.ResourceAttributes{Verb: "impersonate", Resource: "users", Name: imp.User})
	}
	for _, g := range imp.Groups {
		out = append(out, &authorizationv1.ResourceAttributes{Verb: "impersonate", Resource: "groups", Name: g})
	}
	for _, k := range slices.Sorted(maps.Keys(imp.Extra)) {
		for _, v := range imp.Extra[k] {
			out = append(out, &authorizationv1.ResourceAttributes{
				Verb: "impersonate", Group: authenticationGroup, Version: "v1",
				Resource: "userextras", Subresource: k, Name: v,
			})
		}
	}
	if imp.UID != "" {
		out = append(out, &authorizationv1.ResourceAttributes{
			Verb: "impersonate", Group: authenticationGroup, Version: "v1", Resource: "uids", Name: imp.UID,
		})
	}
	return out
}
