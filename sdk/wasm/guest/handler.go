package guest

import (
	"github.com/allot-ipam/allot/sdk/policy"
)

// This file holds everything the exports do except touching pointers, so it builds and is
// tested on any GOOS; exports_wasip1.go is the thin pointer glue.

// Response frame tags (sdk/ABI.md): the first byte of every select response.
const (
	frameOK    byte = 0
	frameError byte = 1
)

// errorFrame returns an error frame carrying err's message, reusing out's storage.
func errorFrame(out []byte, err error) []byte {
	return append(append(out[:0], frameError), err.Error()...)
}

// handlePodPools decodes a PodRequest, runs the registered policy and returns the response
// frame, reusing out's storage.
func handlePodPools(out, req []byte) []byte {
	if plugin.policy == nil {
		return errorFrame(out, errNoPolicy)
	}
	r, err := decodePodRequest(req)
	if err != nil {
		return errorFrame(out, err)
	}
	d, err := plugin.policy.SelectPodPools(ctx, r)
	if err != nil {
		return errorFrame(out, err)
	}
	return appendPodDecision(append(out[:0], frameOK), d)
}

// handleNodeCIDRConfig is handlePodPools for node requests.
func handleNodeCIDRConfig(out, req []byte) []byte {
	if plugin.policy == nil {
		return errorFrame(out, errNoPolicy)
	}
	r, err := decodeNodeRequest(req)
	if err != nil {
		return errorFrame(out, err)
	}
	d, err := plugin.policy.SelectNodeCIDRConfig(ctx, r)
	if err != nil {
		return errorFrame(out, err)
	}
	return appendNodeDecision(append(out[:0], frameOK), d)
}

// pluginInfo encodes what allot_plugin_info reports.
func pluginInfo() []byte {
	return appendPluginInfo(nil, plugin.name, plugin.version, policy.ContractVersion)
}

type sdkError string

func (e sdkError) Error() string { return string(e) }

const errNoPolicy = sdkError("guest: no policy registered; call guest.RegisterPoolPolicy from an init function")
