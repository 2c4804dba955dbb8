// Command pause is the lab's pod sandbox process, like Kubernetes' pause: PID 1 of a pod's
// namespaces, it holds them open, reaps the zombies of orphaned processes re-parented to it, and
// exits 0 on SIGINT or SIGTERM (the runtime's stop). Nothing else: it must never die on its own.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

const version = "stockade-pause 1"

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		fmt.Println(version)
		return
	}
	if os.Getpid() != 1 {
		// Still useful (tests run it outside a PID namespace), but orphans then go to the real init.
		fmt.Fprintln(os.Stderr, "Warning: pause should be the first process")
	}
	// Separate channels: signal.Notify drops what a full channel cannot take, and a burst of SIGCHLD
	// must never crowd out the stop. One pending SIGCHLD is enough since reap() takes all exits.
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	child := make(chan os.Signal, 1)
	signal.Notify(child, syscall.SIGCHLD)
	reap() // anything that exited before the handler was in place
	for {
		select {
		case sig := <-stop:
			fmt.Fprintf(os.Stderr, "Shutting down, got signal: %s\n", sig)
			os.Exit(0)
		case <-child:
			reap()
		}
	}
}

// reap collects every exited child. Signals coalesce (one SIGCHLD for several exits), so it loops
// until none is left; WNOHANG keeps it from blocking while live children remain.
func reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if pid <= 0 || err != nil {
			return
		}
	}
}
