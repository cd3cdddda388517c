package interpreter

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// dropEmptyArrays applies Karmada's post-processing of a Lua result encoded
// by gopher-json when no reference object is given (statusAggregation and
// statusReflection): a bare [] is an empty object, and any [] below the root,
// whether an object member or an array element, is removed. Numbers pass
// through untouched.
func dropEmptyArrays(data []byte) ([]byte, error) {
	if bytes.Equal(bytes.TrimSpace(data), []byte("[]")) {
		return []byte("{}"), nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var root any
	if err := dec.Decode(&root); err != nil {
		return nil, fmt.Errorf("parse lua result json: %w", err)
	}
	out, err := json.Marshal(pruneEmpty(root))
	if err != nil {
		return nil, fmt.Errorf("re-encode lua result json: %w", err)
	}
	return out, nil
}

func pruneEmpty(value any) any {
	switch v := value.(type) {
	case map[string]any:
		for key, child := range v {
			if isEmptyArray(child) {
				delete(v, key)
				continue
			}
			v[key] = pruneEmpty(child)
		}
		return v
	case []any:
		kept := v[:0]
		for _, child := range v {
			if isEmptyArray(child) {
				continue
			}
			kept = append(kept, pruneEmpty(child))
		}
		return kept
	default:
		return value
	}
}

func isEmptyArray(value any) bool {
	arr, ok := value.([]any)
	return ok && len(arr) == 0
}
