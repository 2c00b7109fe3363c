// Package metricslint checks metrics against Prometheus' naming conventions with the
// client library's own linter (promlint, as `promtool check metrics` does), so a metric
// with a bad name, unit or help text fails a test instead of reaching dashboards.
package metricslint

import (
	"fmt"
	"io"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
)

// Text lints metrics in the text exposition format (a /metrics answer) and returns one
// line per problem.
func Text(r io.Reader) ([]string, error) {
	ps, err := promlint.New(r).Lint()
	if err != nil {
		return nil, fmt.Errorf("metricslint: %w", err)
	}
	return format(ps), nil
}

// Gatherer lints what g gathers.
func Gatherer(g prometheus.Gatherer) ([]string, error) {
	mfs, err := g.Gather()
	if err != nil {
		return nil, fmt.Errorf("metricslint: gather: %w", err)
	}
	ps, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		return nil, fmt.Errorf("metricslint: %w", err)
	}
	return format(ps), nil
}

func format(ps []promlint.Problem) []string {
	out := make([]string, 0, len(ps))
	for _, p := range ps {
		out = append(out, p.Metric+": "+p.Text)
	}
	return out
}

// Names returns the metric family names in a text exposition (for checking that what a
// dashboard or an alert uses exists).
func Names(text string) map[string]bool {
	names := map[string]bool{}
	for _, line := range strings.Split(text, "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "#" && f[1] == "TYPE" {
			names[f[2]] = true
		}
	}
	return names
}
