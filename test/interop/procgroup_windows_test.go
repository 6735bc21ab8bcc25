package interop

import "os/exec"

// inGroup does nothing on Windows, which has no process groups to signal.
func inGroup(*exec.Cmd) {}

// killGroup kills cmd's process; helper processes it started are left to end with it.
func killGroup(cmd *exec.Cmd) { _ = cmd.Process.Kill() }
