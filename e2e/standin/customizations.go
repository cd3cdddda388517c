package standin

import (
	"encoding/json"
	"fmt"
	"sort"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/interpreter"
)

// customizationGVR is Karmada's ResourceInterpreterCustomization, cluster-scoped.
var customizationGVR = schema.GroupVersionResource{Group: "config.karmada.io", Version: "v1alpha1", Resource: "resourceinterpretercustomizations"}

// interpreterSet is the resource interpreter for one generation of the
// ResourceInterpreterCustomizations in karmada-apiserver.
type interpreterSet struct {
	interpreter *interpreter.Interpreter
	// broken holds, by target, why a customization for it did not load.
	// Karmada's webhook would have refused such an object; without one, its
	// interpreter fails at call time instead of falling back to the
	// built-in behaviour, so the stand-in fails that target too.
	broken map[schema.GroupVersionKind]error
	names  []string
}

// newInterpreterSet loads every customization object; nil objects give the
// built-in interpreter only.
func newInterpreterSet(objs []*unstructured.Unstructured) *interpreterSet {
	set := &interpreterSet{broken: map[schema.GroupVersionKind]error{}}
	var loaded []*interpreter.Customization
	for _, obj := range objs {
		set.names = append(set.names, obj.GetName())
		c, err := loadCustomization(obj)
		if err != nil {
			apiVersion, _, _ := unstructured.NestedString(obj.Object, "spec", "target", "apiVersion")
			kind, _, _ := unstructured.NestedString(obj.Object, "spec", "target", "kind")
			set.broken[schema.FromAPIVersionAndKind(apiVersion, kind)] = err
			continue
		}
		loaded = append(loaded, c)
	}
	sort.Strings(set.names)
	set.interpreter = interpreter.NewInterpreter(loaded...)
	return set
}

func loadCustomization(obj *unstructured.Unstructured) (*interpreter.Customization, error) {
	// JSON is YAML, and Load checks the scripts as Karmada's webhook would.
	raw, err := json.Marshal(obj.Object)
	if err != nil {
		return nil, fmt.Errorf("ResourceInterpreterCustomization %s: %w", obj.GetName(), err)
	}
	c, err := interpreter.Load(raw)
	if err != nil {
		return nil, fmt.Errorf("ResourceInterpreterCustomization %s: %w", obj.GetName(), err)
	}
	return c, nil
}

// reflectStatus is what the work status controller records for a member
// object: the customization's statusReflection, else the whole status.
func (s *interpreterSet) reflectStatus(observed *unstructured.Unstructured) (map[string]any, bool, error) {
	if err := s.broken[observed.GroupVersionKind()]; err != nil {
		return nil, false, err
	}
	return s.interpreter.ReflectStatus(observed)
}

// aggregateStatus is the template with status aggregated from items by the
// customization's statusAggregation, else Karmada's built-in aggregation.
func (s *interpreterSet) aggregateStatus(template *unstructured.Unstructured, items []interpreter.StatusItem) (*unstructured.Unstructured, error) {
	if err := s.broken[template.GroupVersionKind()]; err != nil {
		return nil, err
	}
	return s.interpreter.AggregateStatus(template, items)
}
