//go:build !unix

package pluginrpc

import "os"

var pluginStderr = os.Stderr

func useRealStdout() {}
