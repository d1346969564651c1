// Package grafana holds the meganode Grafana dashboard (meganode.json) and reads the metric
// names its queries use, for the test that checks each is exported by a running cluster
// (test/e2e/scheduler) and for this package's own test.
//
// The names come from a small PromQL tokenizer rather than Prometheus' own parser
// (github.com/prometheus/prometheus/promql/parser): adding that module moves k8s.io/api,
// client-go and apimachinery from v0.36.3 to v0.37 and grpc and otel with them, which the
// Kubernetes v1.36.3 binaries built from this module cannot take.
package grafana

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// Dashboard is deploy/grafana/meganode.json.
//
//go:embed meganode.json
var Dashboard []byte

// Query is one PromQL expression of the dashboard and where it is.
type Query struct {
	Where string // panel title and refId, or variable name
	Expr  string
}

type panel struct {
	Title   string `json:"title"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's panels
}

// Queries returns every expression of a dashboard: the panels' targets (rows' panels
// included) and the query variables' label_values(metric, label) metrics.
func Queries(data []byte) ([]Query, error) {
	var d struct {
		Panels     []panel `json:"panels"`
		Templating struct {
			List []struct {
				Name  string          `json:"name"`
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, fmt.Errorf("dashboard JSON: %w", err)
	}
	var qs []Query
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, t := range p.Targets {
				qs = append(qs, Query{Where: fmt.Sprintf("panel %q %s", p.Title, t.RefID), Expr: t.Expr})
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		var s string
		if json.Unmarshal(v.Query, &s) != nil {
			if err := json.Unmarshal(v.Query, &q); err != nil {
				return nil, fmt.Errorf("variable %s: query: %w", v.Name, err)
			}
			s = q.Query
		}
		m := labelValues.FindStringSubmatch(strings.TrimSpace(s))
		if m == nil {
			return nil, fmt.Errorf("variable %s: want label_values(metric, label), got %q", v.Name, s)
		}
		qs = append(qs, Query{Where: "variable " + v.Name, Expr: m[1]})
	}
	return qs, nil
}

var labelValues = regexp.MustCompile(`^label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*,\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)$`)

// keywords are PromQL's operators and modifiers spelled as words.
var keywords = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true,
	"group_right": true, "bool": true, "and": true, "or": true, "unless": true, "offset": true, "atan2": true,
	"inf": true, "nan": true}

// aggregators may take their grouping before their argument: `sum by (le) (rate(x[5m]))`.
var aggregators = map[string]bool{"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true,
	"stdvar": true, "count": true, "count_values": true, "bottomk": true, "topk": true, "quantile": true,
	"limitk": true, "limit_ratio": true}

// grouping keywords take a parenthesised list of label names.
var grouping = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}

// MetricNames returns the metric names a PromQL expression selects: identifiers outside label
// matchers ({...}), range/subquery brackets ([...]), strings and grouping lists, that are not
// keywords or function calls. It refuses what it cannot read (unbalanced brackets, an
// unterminated string, a character PromQL does not have).
func MetricNames(expr string) ([]string, error) {
	var names []string
	isStart := func(c byte) bool { return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
	isPart := func(c byte) bool { return isStart(c) || c >= '0' && c <= '9' }
	skipSpace := func(i int) int {
		for i < len(expr) && strings.IndexByte(" \t\n\r", expr[i]) >= 0 {
			i++
		}
		return i
	}
	// skipTo returns the index after the closing byte, skipping strings inside.
	skipTo := func(i int, closing byte) (int, error) {
		for i < len(expr) {
			switch c := expr[i]; {
			case c == closing:
				return i + 1, nil
			case c == '"' || c == '\'' || c == '`':
				j := i + 1
				for j < len(expr) && expr[j] != c {
					if expr[j] == '\\' && c != '`' {
						j++
					}
					j++
				}
				if j >= len(expr) {
					return 0, fmt.Errorf("unterminated string at %d in %q", i, expr)
				}
				i = j + 1
			default:
				i++
			}
		}
		return 0, fmt.Errorf("no closing %q in %q", closing, expr)
	}
	depth := 0
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case strings.IndexByte(" \t\n\r", c) >= 0:
			i++
		case c == '{':
			j, err := skipTo(i+1, '}')
			if err != nil {
				return nil, err
			}
			i = j
		case c == '[':
			j, err := skipTo(i+1, ']')
			if err != nil {
				return nil, err
			}
			i = j
		case c == '"' || c == '\'' || c == '`':
			j, err := skipTo(i+1, c)
			if err != nil {
				return nil, err
			}
			i = j
		case c >= '0' && c <= '9' || c == '.' && i+1 < len(expr) && expr[i+1] >= '0' && expr[i+1] <= '9':
			// A number (0.99, 1e3, 0x1f) or a duration (5m): digits, letters and dots.
			for i < len(expr) && (isPart(expr[i]) || expr[i] == '.') {
				i++
			}
		case isStart(c):
			j := i
			for j < len(expr) && isPart(expr[j]) {
				j++
			}
			word := expr[i:j]
			k := skipSpace(j)
			switch {
			case grouping[strings.ToLower(word)]:
				if k < len(expr) && expr[k] == '(' {
					e, err := skipTo(k+1, ')')
					if err != nil {
						return nil, err
					}
					k = e
				}
				i = k
				continue
			case keywords[strings.ToLower(word)]:
			case k < len(expr) && expr[k] == '(':
				// a function call
			case aggregators[strings.ToLower(word)] && (hasWordAt(expr, k, "by") || hasWordAt(expr, k, "without")):
			default:
				names = append(names, word)
			}
			i = j
		case c == '(':
			depth++
			i++
		case c == ')':
			if depth--; depth < 0 {
				return nil, fmt.Errorf("unbalanced ')' at %d in %q", i, expr)
			}
			i++
		case c == '$':
			// A Grafana variable outside brackets ($__interval in a function argument): skip it.
			i++
			for i < len(expr) && (isPart(expr[i]) || expr[i] == '{' || expr[i] == '}') {
				i++
			}
		case strings.IndexByte("+-*/%^=!<>,@", c) >= 0:
			i++
		default:
			return nil, fmt.Errorf("unexpected %q at %d in %q", c, i, expr)
		}
	}
	if depth != 0 {
		return nil, fmt.Errorf("unbalanced '(' in %q", expr)
	}
	return names, nil
}

// hasWordAt: expr has the word w (case-insensitive, then not an identifier character) at i.
func hasWordAt(expr string, i int, w string) bool {
	if i+len(w) > len(expr) || !strings.EqualFold(expr[i:i+len(w)], w) {
		return false
	}
	if i+len(w) == len(expr) {
		return true
	}
	c := expr[i+len(w)]
	return !(c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9')
}

// AllMetricNames returns the sorted, distinct metric names of every query of a dashboard, each
// with the queries that use it.
func AllMetricNames(data []byte) (map[string][]string, []string, error) {
	qs, err := Queries(data)
	if err != nil {
		return nil, nil, err
	}
	uses := map[string][]string{}
	for _, q := range qs {
		ns, err := MetricNames(q.Expr)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", q.Where, err)
		}
		if len(ns) == 0 {
			return nil, nil, fmt.Errorf("%s: no metric in %q", q.Where, q.Expr)
		}
		for _, n := range ns {
			uses[n] = append(uses[n], q.Where)
		}
	}
	names := make([]string, 0, len(uses))
	for n := range uses {
		names = append(names, n)
	}
	sort.Strings(names)
	return uses, names, nil
}
