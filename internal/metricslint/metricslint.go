// Package metricslint checks metrics against Prometheus' naming conventions with the
// client library's own linter (promlint, as `promtool check metrics` does), so a metric
// with a bad name, unit or help text fails a test instead of reaching dashboards.
package metricslint

import (
	"fmt"
	"io"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
)

// Text lints metrics in the text exposition format (a /metrics answer) and returns one
// line per problem.
func Text(r io.Reader) ([]string, error) {
	ps, err := promlint.New(r).Lint()
	if err != nil {
		return nil, fmt.Errorf("metricslint: %w", err)
	}
	out := make([]string, 0, len(ps))
	for _, p := range ps {
		out = append(out, p.Metric+": "+p.Text)
	}
	return out, nil
}
