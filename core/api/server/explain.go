package server

import (
	"context"

	"github.com/allot-ipam/allot/core/api"
	"github.com/allot-ipam/allot/core/api/frame"
)

// explainer is the service's api.Explainer, or one that says the daemon records nothing.
func explainer(svc api.Service) api.Explainer {
	if e, ok := svc.(api.Explainer); ok {
		return e
	}
	return noExplainer{}
}

type noExplainer struct{}

func (noExplainer) Explain(context.Context, *api.ExplainRequest) (*api.ExplainResponse, error) {
	return nil, api.Errorf(api.CodeNotFound, "this allotd records no explanations")
}

// explainCall decodes a framed explain request into its call.
func explainCall(svc api.Service, p []byte) (func(context.Context, []byte) ([]byte, error), error) {
	req := new(api.ExplainRequest)
	if err := frame.DecodeExplainRequest(p, req); err != nil {
		return nil, err
	}
	e := explainer(svc)
	return func(ctx context.Context, b []byte) ([]byte, error) {
		r, err := e.Explain(ctx, req)
		if err != nil {
			return b, err
		}
		return frame.AppendExplainResponse(b, r), nil
	}, nil
}
