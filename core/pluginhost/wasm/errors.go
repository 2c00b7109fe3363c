package wasm

import (
	"errors"

	"github.com/allot-ipam/allot/sdk/version"
)

// Sentinel errors, for errors.Is. Every error this package returns wraps one of them (or a
// context error) and names the plugin.
var (
	// ErrChecksum: the .wasm file's sha256 is not the pinned one.
	ErrChecksum = errors.New("sha256 mismatch")
	// ErrContractVersion: the guest speaks a contract version this host cannot. It is the
	// sdk's version.ErrIncompatible, so callers can test for either.
	ErrContractVersion = version.ErrIncompatible
	// ErrABI: the module does not implement the allot WASM ABI (missing or mistyped export,
	// unknown import, out-of-bounds or undecodable response).
	ErrABI = errors.New("allot wasm ABI violation")
	// ErrTrap: the guest trapped (panic, unreachable, out of memory, proc_exit) during a call.
	// The instance was discarded.
	ErrTrap = errors.New("guest trapped")
	// ErrTimeout: the call ran past its deadline; the instance was closed and replaced.
	ErrTimeout = errors.New("call deadline exceeded")
	// ErrPolicy: the guest policy returned an error (the instance stays in service).
	ErrPolicy = errors.New("policy returned an error")
	// ErrClosed: the plugin was closed.
	ErrClosed = errors.New("plugin closed")
	// ErrConfig: the Config is invalid; the message names the field.
	ErrConfig = errors.New("invalid config")
)
