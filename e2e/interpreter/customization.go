package interpreter

import (
	"errors"
	"fmt"
	"sort"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/yaml"
)

const (
	customizationAPIVersion = "config.karmada.io/v1alpha1"
	customizationKind       = "ResourceInterpreterCustomization"
)

// ErrNotCustomized reports that a customization has no script for the
// requested operation; Karmada then falls through to its built-in interpreter.
var ErrNotCustomized = errors.New("customization has no script for this operation")

// StatusItem is one member cluster's entry of a ResourceBinding's
// status.aggregatedStatus, as Karmada hands it to AggregateStatus.
type StatusItem struct {
	ClusterName string
	// Status is the reflected status; nil when the member has not reported
	// one yet (Karmada then omits the field).
	Status         map[string]any
	Applied        bool
	AppliedMessage string
	// Health is Healthy, Unhealthy or Unknown.
	Health string
}

// aggregatedStatusItem is the JSON shape of Karmada's
// workv1alpha2.AggregatedStatusItem, which is what a script receives.
type aggregatedStatusItem struct {
	ClusterName string `json:"clusterName"`
	// Status is an interface so that an empty but present status still
	// encodes as {}, like Karmada's non-nil *runtime.RawExtension.
	Status         any    `json:"status,omitempty"`
	Applied        bool   `json:"applied,omitempty"`
	AppliedMessage string `json:"appliedMessage,omitempty"`
	Health         string `json:"health,omitempty"`
}

func toAggregatedStatusItems(items []StatusItem) []aggregatedStatusItem {
	if items == nil {
		// Karmada passes a nil slice through JSON as null: the script sees nil.
		return nil
	}
	out := make([]aggregatedStatusItem, len(items))
	for i, item := range items {
		out[i] = aggregatedStatusItem{ClusterName: item.ClusterName, Applied: item.Applied, AppliedMessage: item.AppliedMessage, Health: item.Health}
		if item.Status != nil {
			out[i].Status = item.Status
		}
	}
	return out
}

type luaRule struct {
	LuaScript string `json:"luaScript"`
}

// rules mirrors the CRD's spec.customizations.
type rules struct {
	Retention                *luaRule `json:"retention,omitempty"`
	ReplicaResource          *luaRule `json:"replicaResource,omitempty"`
	ReplicaRevision          *luaRule `json:"replicaRevision,omitempty"`
	StatusReflection         *luaRule `json:"statusReflection,omitempty"`
	StatusAggregation        *luaRule `json:"statusAggregation,omitempty"`
	HealthInterpretation     *luaRule `json:"healthInterpretation,omitempty"`
	DependencyInterpretation *luaRule `json:"dependencyInterpretation,omitempty"`
	ComponentResource        *luaRule `json:"componentResource,omitempty"`
}

type document struct {
	APIVersion string         `json:"apiVersion"`
	Kind       string         `json:"kind"`
	Metadata   map[string]any `json:"metadata"`
	Spec       struct {
		Target struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		} `json:"target"`
		Customizations rules `json:"customizations"`
	} `json:"spec"`
	Status map[string]any `json:"status,omitempty"`
}

// Customization is one loaded ResourceInterpreterCustomization.
type Customization struct {
	// Name is metadata.name; it orders customizations sharing a target.
	Name   string
	Target schema.GroupVersionKind
	rules  rules
}

// Load parses a ResourceInterpreterCustomization from YAML (or JSON) and
// checks that every script compiles and defines the function Karmada calls.
// Unknown fields are rejected so a misspelt rule cannot silently do nothing.
func Load(yamlBytes []byte) (*Customization, error) {
	var doc document
	if err := yaml.UnmarshalStrict(yamlBytes, &doc); err != nil {
		return nil, fmt.Errorf("parse ResourceInterpreterCustomization: %w", err)
	}
	if doc.APIVersion != customizationAPIVersion || doc.Kind != customizationKind {
		return nil, fmt.Errorf("expected %s %s, got %q %q", customizationAPIVersion, customizationKind, doc.APIVersion, doc.Kind)
	}
	name, _ := doc.Metadata["name"].(string)
	if name == "" {
		return nil, errors.New("ResourceInterpreterCustomization has no metadata.name")
	}
	target := doc.Spec.Target
	if target.APIVersion == "" || target.Kind == "" {
		return nil, fmt.Errorf("customization %s: spec.target needs apiVersion and kind", name)
	}
	c := &Customization{
		Name:   name,
		Target: schema.FromAPIVersionAndKind(target.APIVersion, target.Kind),
		rules:  doc.Spec.Customizations,
	}
	for _, check := range []struct {
		rule *luaRule
		fn   string
	}{
		{c.rules.Retention, "Retain"},
		{c.rules.ReplicaResource, "GetReplicas"},
		{c.rules.ReplicaRevision, "ReviseReplica"},
		{c.rules.StatusReflection, "ReflectStatus"},
		{c.rules.StatusAggregation, "AggregateStatus"},
		{c.rules.HealthInterpretation, "InterpretHealth"},
		{c.rules.DependencyInterpretation, "GetDependencies"},
		{c.rules.ComponentResource, "GetComponents"},
	} {
		if check.rule == nil {
			continue
		}
		if err := compileCheck(check.rule.LuaScript, check.fn); err != nil {
			return nil, fmt.Errorf("customization %s: %s: %w", name, check.fn, err)
		}
	}
	return c, nil
}

func script(rule *luaRule) string {
	if rule == nil {
		return ""
	}
	return rule.LuaScript
}

// HasStatusReflection tells whether ReflectStatus runs a script.
func (c *Customization) HasStatusReflection() bool { return script(c.rules.StatusReflection) != "" }

// HasStatusAggregation tells whether AggregateStatus runs a script.
func (c *Customization) HasStatusAggregation() bool { return script(c.rules.StatusAggregation) != "" }

// ReflectStatus runs the statusReflection script (ReflectStatus(observedObj))
// on a member object. ok is false when the customization has none, and the
// caller should use DefaultReflectStatus, as Karmada does.
func (c *Customization) ReflectStatus(observed *unstructured.Unstructured) (status map[string]any, ok bool, err error) {
	src := script(c.rules.StatusReflection)
	if src == "" {
		return nil, false, nil
	}
	rets, err := callScript(src, "ReflectStatus", 1, observed)
	if err != nil {
		return nil, true, fmt.Errorf("customization %s: %w", c.Name, err)
	}
	data, err := fromLua(rets[0])
	if err != nil {
		return nil, true, fmt.Errorf("customization %s: ReflectStatus: %w", c.Name, err)
	}
	status = map[string]any{}
	if err := utiljson.Unmarshal(data, &status); err != nil {
		return nil, true, fmt.Errorf("customization %s: ReflectStatus returned %s, not an object: %w", c.Name, data, err)
	}
	return status, true, nil
}

// AggregateStatus runs the statusAggregation script
// (AggregateStatus(desiredObj, statusItems)) and returns the whole object it
// returns. It fails with ErrNotCustomized when there is no script.
func (c *Customization) AggregateStatus(template *unstructured.Unstructured, items []StatusItem) (*unstructured.Unstructured, error) {
	src := script(c.rules.StatusAggregation)
	if src == "" {
		return nil, fmt.Errorf("customization %s: %w", c.Name, ErrNotCustomized)
	}
	rets, err := callScript(src, "AggregateStatus", 1, template, toAggregatedStatusItems(items))
	if err != nil {
		return nil, fmt.Errorf("customization %s: %w", c.Name, err)
	}
	data, err := fromLua(rets[0])
	if err != nil {
		return nil, fmt.Errorf("customization %s: AggregateStatus: %w", c.Name, err)
	}
	out := &unstructured.Unstructured{}
	if err := out.UnmarshalJSON(data); err != nil {
		return nil, fmt.Errorf("customization %s: AggregateStatus result: %w", c.Name, err)
	}
	return out, nil
}

// Interpreter dispatches status operations the way Karmada's
// ResourceInterpreter does: a customization for the object's kind that has
// the script, else the built-in behaviour. The zero value and a nil
// *Interpreter use the built-in behaviour only.
type Interpreter struct {
	reflection  map[schema.GroupVersionKind]*Customization
	aggregation map[schema.GroupVersionKind]*Customization
}

// NewInterpreter indexes customizations by target. For one target the
// customizations are taken in name order and the first one defining a rule
// supplies it, as Karmada's config manager merges them.
func NewInterpreter(customizations ...*Customization) *Interpreter {
	sorted := append([]*Customization(nil), customizations...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	in := &Interpreter{
		reflection:  map[schema.GroupVersionKind]*Customization{},
		aggregation: map[schema.GroupVersionKind]*Customization{},
	}
	for _, c := range sorted {
		if _, taken := in.reflection[c.Target]; !taken && c.rules.StatusReflection != nil {
			in.reflection[c.Target] = c
		}
		if _, taken := in.aggregation[c.Target]; !taken && c.rules.StatusAggregation != nil {
			in.aggregation[c.Target] = c
		}
	}
	return in
}

// ReflectStatus returns what Karmada records as a member object's status in
// the Work and the binding's aggregatedStatus; ok is false when there is none.
func (in *Interpreter) ReflectStatus(observed *unstructured.Unstructured) (status map[string]any, ok bool, err error) {
	if in != nil {
		if c := in.reflection[observed.GroupVersionKind()]; c != nil && c.HasStatusReflection() {
			status, _, err = c.ReflectStatus(observed)
			return status, err == nil, err
		}
	}
	return DefaultReflectStatus(observed)
}

// AggregateStatus returns the template with status aggregated from items.
func (in *Interpreter) AggregateStatus(template *unstructured.Unstructured, items []StatusItem) (*unstructured.Unstructured, error) {
	gvk := template.GroupVersionKind()
	if in != nil {
		if c := in.aggregation[gvk]; c != nil && c.HasStatusAggregation() {
			return c.AggregateStatus(template, items)
		}
	}
	if gvk == podGVK {
		return DefaultAggregatePodStatus(template, items)
	}
	return nil, fmt.Errorf("%w: no built-in status aggregation for %s in the e2e interpreter", ErrNotCustomized, gvk)
}
