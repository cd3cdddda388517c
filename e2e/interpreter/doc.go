// Package interpreter runs Karmada's resource interpretation for the e2e
// Karmada stand-in: the status steps of a ResourceInterpreterCustomization
// (statusReflection, statusAggregation) in gopher-lua, and Karmada's built-in
// Pod behaviour when no customization applies.
//
// It mirrors Karmada v1.19 (pkg/resourceinterpreter): a customization that
// targets the object's apiVersion/kind and has the script wins over the
// built-in interpreter; several customizations for one target merge in name
// order, the first rule of each kind winning. Scripts run in a fresh sandboxed
// state per call with the library set Karmada opens (base without
// load/dofile/setmetatable/..., table, string without gsub/rep/dump, math,
// os.time/os.date, and require("kube")) and a one-second deadline. Values
// cross into Lua as JSON decoded by layeh.com/gopher-json, the encoder Karmada
// uses, and come back the same way, keeping Karmada's quirks: an empty Lua
// table encodes as [] and, with no reference object to tell otherwise, every
// empty array in a returned object is dropped; a table placed twice in a result
// fails to encode.
//
// The package depends on no other e2e package so the stand-in and unit tests
// can both use it.
package interpreter
