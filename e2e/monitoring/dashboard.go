package monitoring

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"
)

// Dashboard is the part of a Grafana dashboard the tests evaluate.
type Dashboard struct {
	Panels     []Panel `json:"panels"`
	Templating struct {
		List []Variable `json:"list"`
	} `json:"templating"`
}

// Panel is a dashboard panel; a row keeps its collapsed panels inside.
type Panel struct {
	Title   string   `json:"title"`
	Type    string   `json:"type"`
	Targets []Target `json:"targets"`
	Panels  []Panel  `json:"panels"`
}

// Target is one query of a panel.
type Target struct {
	RefID string `json:"refId"`
	Expr  string `json:"expr"`
}

// Variable is a dashboard template variable.
type Variable struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Query      json.RawMessage `json:"query"`
	Multi      bool            `json:"multi"`
	IncludeAll bool            `json:"includeAll"`
	AllValue   string          `json:"allValue"`
}

// ParseDashboard decodes a dashboard's JSON.
func ParseDashboard(b []byte) (Dashboard, error) {
	var d Dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		return d, fmt.Errorf("dashboard JSON: %w", err)
	}
	return d, nil
}

// Query is one panel query, named for failure messages.
type Query struct {
	// Name is `panel "<title>" query <refId>`.
	Name string
	Expr string
}

// Queries lists every query of every panel, rows' collapsed panels included.
func (d Dashboard) Queries() []Query {
	var out []Query
	var walk func([]Panel)
	walk = func(ps []Panel) {
		for _, p := range ps {
			for i, t := range p.Targets {
				ref := t.RefID
				if ref == "" {
					ref = fmt.Sprint(i)
				}
				out = append(out, Query{Name: fmt.Sprintf("panel %q query %s", p.Title, ref), Expr: t.Expr})
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

// QueryText is the variable's query string, whether the dashboard keeps it
// as a string or, as newer Grafana does, as {"query": ...}.
func (v Variable) QueryText() (string, error) {
	var s string
	if err := json.Unmarshal(v.Query, &s); err == nil {
		return s, nil
	}
	var o struct {
		Query string `json:"query"`
	}
	if err := json.Unmarshal(v.Query, &o); err != nil {
		return "", fmt.Errorf("variable %s: query is neither a string nor {query}: %s", v.Name, v.Query)
	}
	return o.Query, nil
}

// VariableQuery is a query variable's label_values(Selector, Label).
type VariableQuery struct {
	Variable
	Selector, Label string
}

// VariableQueries lists the dashboard's query variables in order; data
// source variables are Grafana's own and left out. A variable that is not
// a label_values query is an error: nothing else is expanded here.
func (d Dashboard) VariableQueries() ([]VariableQuery, error) {
	var out []VariableQuery
	for _, v := range d.Templating.List {
		if v.Type == "datasource" {
			continue
		}
		q, err := v.QueryText()
		if err != nil {
			return nil, err
		}
		selector, label, err := LabelValuesQuery(q)
		if err != nil {
			return nil, fmt.Errorf("variable %s: %w", v.Name, err)
		}
		out = append(out, VariableQuery{Variable: v, Selector: selector, Label: label})
	}
	return out, nil
}

var labelValuesRE = regexp.MustCompile(`^\s*label_values\(\s*(?:(.*?)\s*,\s*)?([a-zA-Z_][a-zA-Z0-9_]*)\s*\)\s*$`)

// LabelValuesQuery splits Grafana's `label_values(<series selector>, <label>)`
// (or `label_values(<label>)`) into its selector and label.
func LabelValuesQuery(q string) (selector, label string, err error) {
	m := labelValuesRE.FindStringSubmatch(q)
	if m == nil {
		return "", "", fmt.Errorf("%q is not label_values(...)", q)
	}
	return m[1], m[2], nil
}

// Grafana is what Grafana substitutes into a Prometheus query before it
// sends it: the values chosen for the template variables and the built-in
// interval variables of the time range a panel shows.
type Grafana struct {
	// Values are the chosen values of each template variable; several for
	// a multi-value variable, the variable's allValue for "All".
	Values map[string][]string
	// Variables are the dashboard's, for how each one is formatted.
	Variables []Variable
	// ScrapeInterval is the data source's scrape interval (Grafana's
	// "Scrape interval" setting), Interval the panel's step
	// ($__interval), Range the time range shown ($__range).
	ScrapeInterval, Interval, Range time.Duration
}

var variableRE = regexp.MustCompile(`\$\{([a-zA-Z0-9_]+)(?::[a-z]+)?\}|\[\[([a-zA-Z0-9_]+)\]\]|\$([a-zA-Z0-9_]+)`)

// Expand substitutes variables in expr as Grafana's Prometheus data source
// does:
//   - $__interval is the step, $__range the range, $__rate_interval
//     max($__interval + scrape interval, 4 * scrape interval) — Grafana's
//     definition, so rate() always sees at least two samples;
//   - a template variable with one value and neither multi nor includeAll
//     is its value as it is; otherwise every value is regex-escaped and
//     several are joined as (a|b), since such variables are meant for =~;
//     the value All is the variable's allValue, unescaped.
//
// A variable it does not know is an error, never left in the query.
func (g Grafana) Expand(expr string) (string, error) {
	var missing []string
	out := variableRE.ReplaceAllStringFunc(expr, func(m string) string {
		sub := variableRE.FindStringSubmatch(m)
		name := sub[1] + sub[2] + sub[3]
		switch name {
		case "__interval":
			return duration(g.Interval)
		case "__range":
			return duration(g.Range)
		case "__rate_interval":
			return duration(max(g.Interval+g.ScrapeInterval, 4*g.ScrapeInterval))
		}
		values, ok := g.Values[name]
		if !ok {
			missing = append(missing, name)
			return m
		}
		return g.format(name, values)
	})
	if len(missing) > 0 {
		sort.Strings(missing)
		return "", fmt.Errorf("no value for the variables %q in %s", missing, expr)
	}
	return out, nil
}

// ExpandQueries expands every query of d; the error names each query it
// could not expand, and a dashboard without queries is one.
func (g Grafana) ExpandQueries(d Dashboard) ([]Query, error) {
	qs := d.Queries()
	if len(qs) == 0 {
		return nil, errors.New("the dashboard has no queries")
	}
	var errs []error
	for i, q := range qs {
		expr, err := g.Expand(q.Expr)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", q.Name, err))
		}
		qs[i].Expr = expr
	}
	return qs, errors.Join(errs...)
}

func (g Grafana) format(name string, values []string) string {
	var v Variable
	for _, x := range g.Variables {
		if x.Name == name {
			v = x
		}
	}
	if len(values) == 1 && values[0] == v.AllValue && v.AllValue != "" {
		return values[0]
	}
	if len(values) == 1 && !v.Multi && !v.IncludeAll {
		return regularEscaper.Replace(values[0])
	}
	quoted := make([]string, len(values))
	for i, s := range values {
		quoted[i] = regexSpecial.ReplaceAllString(strings.ReplaceAll(s, `\`, `\\\\`), `\\$0`)
	}
	if len(quoted) == 1 {
		return quoted[0]
	}
	return "(" + strings.Join(quoted, "|") + ")"
}

// Grafana's prometheusRegularEscape and prometheusSpecialRegexEscape: the
// escapes survive the PromQL string literal the value lands in.
var (
	regularEscaper = strings.NewReplacer(`\`, `\\`, `'`, `\\'`)
	regexSpecial   = regexp.MustCompile(`[$^*{}\[\]'+?.()|]`)
)
