package interpreter

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	lua "github.com/yuin/gopher-lua"
	"k8s.io/apimachinery/pkg/api/resource"
	luajson "layeh.com/gopher-json"
)

// scriptTimeout is the deadline Karmada gives one interpreter call.
const scriptTimeout = time.Second

// maxStringArg is Karmada's cap on a string argument to its string library.
const maxStringArg = 1000000

// blockedBaseFunctions are the base functions Karmada replaces with ones that
// raise, so a script cannot load code or escape through metatables.
var blockedBaseFunctions = []string{
	"collectgarbage", "dofile", "getfenv", "getmetatable", "load", "loadfile",
	"loadstring", "rawequal", "rawget", "rawset", "setfenv", "setmetatable",
	"module", "newproxy",
}

// blockedStringFunctions can build huge strings (gsub, rep) or expose bytecode
// (dump); Karmada refuses them.
var blockedStringFunctions = []string{"gsub", "rep", "dump"}

// lengthCheckedStringFunctions take the subject string (and a pattern) as
// their first arguments. gmatch/gfind are closures over an iterator and are
// left as gopher-lua ships them.
var lengthCheckedStringFunctions = []string{"byte", "find", "format", "lower", "match", "reverse", "sub", "upper"}

// safeOsFunctions are taken once from gopher-lua's own os library, so the
// sandbox offers exactly its os.time and os.date and nothing else from os.
var safeOsFunctions = sync.OnceValue(func() map[string]lua.LGFunction {
	l := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer l.Close()
	l.Push(l.NewFunction(lua.OpenOs))
	l.Push(lua.LString(lua.OsLibName))
	l.Call(1, 1)
	mod := l.Get(-1).(*lua.LTable)
	funcs := map[string]lua.LGFunction{}
	for _, name := range []string{"time", "date"} {
		funcs[name] = mod.RawGetString(name).(*lua.LFunction).GFunction
	}
	return funcs
})

// newSandbox returns a Lua state with Karmada's library set.
func newSandbox(ctx context.Context) (*lua.LState, error) {
	l := lua.NewState(lua.Options{SkipOpenLibs: true})
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{
		{lua.LoadLibName, lua.OpenPackage},
		{lua.BaseLibName, lua.OpenBase},
		{lua.TabLibName, lua.OpenTable},
		{lua.StringLibName, lua.OpenString},
		{lua.MathLibName, lua.OpenMath},
	} {
		if err := l.CallByParam(lua.P{Fn: l.NewFunction(lib.open), NRet: 0, Protect: true}, lua.LString(lib.name)); err != nil {
			l.Close()
			return nil, fmt.Errorf("open lua library %q: %w", lib.name, err)
		}
	}
	restrictPackage(l)
	restrictString(l)
	l.RegisterModule(lua.OsLibName, safeOsFunctions())
	for _, name := range blockedBaseFunctions {
		l.SetGlobal(name, refuse(l, fmt.Sprintf("call function %s is not supported in karmada customized resourceinterpreter.", name)))
	}
	l.PreloadModule("kube", kubeLoader)
	l.SetContext(ctx)
	return l, nil
}

// restrictPackage leaves require() only package.preload to search: no Lua
// files from package.path, no native libraries.
func restrictPackage(l *lua.LState) {
	pkg := l.GetGlobal(lua.LoadLibName).(*lua.LTable)
	allLoaders := l.GetField(pkg, "loaders").(*lua.LTable)
	loaders := l.CreateTable(1, 0)
	loaders.Append(allLoaders.RawGetInt(1)) // gopher-lua's preload searcher
	l.SetField(pkg, "loaders", loaders)
	l.SetField(l.Get(lua.RegistryIndex), "_LOADERS", loaders)
	l.SetField(pkg, "loadlib", refuse(l, "loadlib is not supported"))
	for _, field := range []string{"path", "cpath", "config"} {
		l.SetField(pkg, field, lua.LNil)
	}
}

// restrictString edits the string module in place; it is also the string
// metatable's __index, so method calls (s:rep()) see the same restrictions.
func restrictString(l *lua.LState) {
	mod := l.GetGlobal(lua.StringLibName).(*lua.LTable)
	for _, name := range blockedStringFunctions {
		mod.RawSetString(name, refuse(l, fmt.Sprintf("The Lua function string.%s is not supported by Karmada.", name)))
	}
	for _, name := range lengthCheckedStringFunctions {
		fn, ok := mod.RawGetString(name).(*lua.LFunction)
		if !ok || fn.GFunction == nil {
			continue
		}
		inner := fn.GFunction
		mod.RawSetString(name, l.NewFunction(func(l *lua.LState) int {
			for i := 1; i <= 2 && i <= l.GetTop(); i++ {
				if s, ok := l.Get(i).(lua.LString); ok && len(s) > maxStringArg {
					l.RaiseError("string length %d exceeds the maximum allowed input string length %d in Karmada lua string lib, please check your lua script.", len(s), maxStringArg)
				}
			}
			return inner(l)
		}))
	}
}

// refuse returns a function that raises message when a script calls it.
func refuse(l *lua.LState, message string) *lua.LFunction {
	return l.NewFunction(func(l *lua.LState) int {
		l.RaiseError("%s", message)
		return 0
	})
}

// kubeLoader provides Karmada's require("kube"). resourceAdd is implemented;
// the pod-requirement and dependency helpers need Karmada's scheduler helpers
// and raise here, which no status script needs.
func kubeLoader(l *lua.LState) int {
	mod := l.SetFuncs(l.NewTable(), map[string]lua.LGFunction{
		"resourceAdd": kubeResourceAdd,
		"accuratePodRequirements": func(l *lua.LState) int {
			l.RaiseError("kube.accuratePodRequirements is not available in the e2e interpreter")
			return 0
		},
		"getPodDependencies": func(l *lua.LState) int {
			l.RaiseError("kube.getPodDependencies is not available in the e2e interpreter")
			return 0
		},
	})
	l.Push(mod)
	return 1
}

func kubeResourceAdd(l *lua.LState) int {
	var sum resource.Quantity
	for i := 1; i <= l.GetTop(); i++ {
		switch v := l.Get(i).(type) {
		case *lua.LNilType:
		case lua.LString:
			q, err := resource.ParseQuantity(string(v))
			if err != nil {
				l.ArgError(i, err.Error())
			}
			sum.Add(q)
		default:
			l.TypeError(i, lua.LTString)
		}
	}
	l.Push(lua.LString(sum.String()))
	return 1
}

// callScript loads script into a fresh sandbox and calls the global function
// fn with args, each crossing into Lua as JSON, returning nret results.
func callScript(script, fn string, nret int, args ...any) ([]lua.LValue, error) {
	ctx, cancel := context.WithTimeout(context.Background(), scriptTimeout)
	defer cancel()
	l, err := newSandbox(ctx)
	if err != nil {
		return nil, err
	}
	defer l.Close()

	if err := l.DoString(script); err != nil {
		return nil, fmt.Errorf("load lua script: %w", err)
	}
	f := l.GetGlobal(fn)
	if f.Type() == lua.LTNil {
		return nil, fmt.Errorf("not found function %v", fn)
	}
	if f.Type() != lua.LTFunction {
		return nil, fmt.Errorf("%s is not a function: %s", fn, f.Type())
	}
	luaArgs := make([]lua.LValue, len(args))
	for i, arg := range args {
		if luaArgs[i], err = toLua(l, arg); err != nil {
			return nil, err
		}
	}
	if err := l.CallByParam(lua.P{Fn: f, NRet: nret, Protect: true}, luaArgs...); err != nil {
		return nil, fmt.Errorf("call %s: %w", fn, err)
	}
	rets := make([]lua.LValue, nret)
	for i := range rets {
		rets[i] = l.Get(i + 1)
	}
	l.Pop(l.GetTop())
	return rets, nil
}

// compileCheck loads script and requires it to define fn, so a broken
// customization fails at Load rather than on the first status update.
func compileCheck(script, fn string) error {
	ctx, cancel := context.WithTimeout(context.Background(), scriptTimeout)
	defer cancel()
	l, err := newSandbox(ctx)
	if err != nil {
		return err
	}
	defer l.Close()
	if err := l.DoString(script); err != nil {
		return fmt.Errorf("load lua script: %w", err)
	}
	if f := l.GetGlobal(fn); f.Type() != lua.LTFunction {
		return fmt.Errorf("script does not define function %s (found %s)", fn, f.Type())
	}
	return nil
}

// toLua converts a Go value the way Karmada does for objects and status
// items: marshal to JSON, decode with gopher-json (arrays become sequences,
// null becomes nil, numbers become Lua numbers).
func toLua(l *lua.LState, value any) (lua.LValue, error) {
	data, err := json.Marshal(value)
	if err != nil {
		return nil, fmt.Errorf("marshal %T for lua: %w", value, err)
	}
	lv, err := luajson.Decode(l, data)
	if err != nil {
		return nil, fmt.Errorf("decode %T into lua: %w", value, err)
	}
	return lv, nil
}

// fromLua encodes a returned table to JSON as Karmada does: gopher-json, then
// the root [] of an empty table read as {} and every nested empty array
// dropped (Karmada passes no reference object for status results, so it
// cannot tell an empty list from an empty map and removes both).
func fromLua(value lua.LValue) ([]byte, error) {
	table, ok := value.(*lua.LTable)
	if !ok {
		return nil, fmt.Errorf("expect the returned type is table but got %s", value.Type())
	}
	data, err := luajson.Encode(table)
	if err != nil {
		return nil, fmt.Errorf("encode lua result to json: %w", err)
	}
	return dropEmptyArrays(data)
}
