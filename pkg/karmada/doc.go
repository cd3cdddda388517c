// Package karmada holds the few Karmada API types the gateway reads, written
// here because the Karmada Go module is not a dependency we take on.
//
// The types are trimmed to the fields the gateway relies on (placement,
// applied status, cluster readiness). Objects come from dynamic informers as
// unstructured data and are converted once, in the informer's transform, so
// the caches hold small typed objects instead of whole unstructured maps.
//
// MemberMetadata reads one object's metadata in a member through Karmada's
// cluster proxy, for the resolver's check that a member object is a
// template's own copy before the gateway acts on it as itself.
package karmada
