//go:build !unix

package cli

import (
	"os"
	"os/exec"
)

// Without process groups, only the command itself is signalled.
func ownProcessGroup(*exec.Cmd) {}

func killProcessGroup(cmd *exec.Cmd) { _ = cmd.Process.Kill() }

func terminateProcessGroup(cmd *exec.Cmd) { _ = cmd.Process.Kill() }

func exitStatus(ps *os.ProcessState) int { return ps.ExitCode() }
