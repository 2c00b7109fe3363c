//go:build !linux

package process

import "syscall"

// Without Pdeathsig (Linux only), an allotd killed by SIGKILL leaves its plugins running
// until they notice the closed connection; allotd is Linux software, this only keeps the
// package building elsewhere.
func sysProcAttr() *syscall.SysProcAttr { return nil }

func killGroup(int) {}
