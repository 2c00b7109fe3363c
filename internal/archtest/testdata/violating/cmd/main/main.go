// Command main may import anything: it is the composition root.
package main

import (
	"example.com/violating/core/daemon"
	"example.com/violating/plugins/policy"
)

func main() { _, _ = daemon.Run(), policy.Name() }
