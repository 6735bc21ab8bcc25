//go:build unix

package interop

import (
	"os/exec"
	"syscall"
)

// inGroup makes cmd start a process group of its own, so that killGroup ends it and the
// helper processes it starts (Chromium's).
func inGroup(cmd *exec.Cmd) { cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} }

// killGroup kills the process group that cmd started (inGroup).
func killGroup(cmd *exec.Cmd) { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
