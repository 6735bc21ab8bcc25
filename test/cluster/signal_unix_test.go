//go:build unix

package cluster

import "syscall"

// stop pauses the process (SIGSTOP); cont resumes it (SIGCONT).
func (nd *node) stop() { nd.signal(syscall.SIGSTOP) }
func (nd *node) cont() { nd.signal(syscall.SIGCONT) }
