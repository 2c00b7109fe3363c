package client

import (
	"context"
	"net/http"

	"github.com/allot-ipam/allot/core/api"
	"github.com/allot-ipam/allot/core/api/frame"
)

// Explain asks allotd why a pod's interfaces got their addresses, or, with req.DryRun, what
// an ADD would get now (allotctl explain).
func (c *Client) Explain(ctx context.Context, req *api.ExplainRequest) (*api.ExplainResponse, error) {
	var out api.ExplainResponse
	if c.useFramed() {
		err := c.doFramed(ctx, frame.OpExplain, func(b []byte) []byte { return frame.AppendExplainRequest(b, req) },
			func(b []byte) error { return frame.DecodeExplainResponse(b, &out) })
		if err != errFallback {
			return &out, err
		}
	}
	return &out, c.do(ctx, http.MethodPost, "/v1/explain", req, &out)
}
