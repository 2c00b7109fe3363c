package process

import "syscall"

// sysProcAttr makes the plugin die with allotd and keeps it out of allotd's process group.
//
// Pdeathsig delivers SIGKILL when the thread that started the plugin exits. Go never ends
// its threads except those a goroutine locked and left locked, and plugins are started from
// ordinary goroutines, so in practice that is when allotd dies, even by SIGKILL where no
// cleanup code runs. Setpgid puts the plugin in its own group: a Ctrl-C aimed at allotd's
// group does not hit plugins behind the supervisor's back, and killGroup can take down
// anything the plugin spawned.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// killGroup sends SIGKILL to the plugin's process group (its pid, thanks to Setpgid).
func killGroup(pid int) {
	if pid > 1 {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	}
}
