// Command bernstein keeps the work of agent tasks in an ordinary git
// repository. Every command is a thin adapter over the bernstein library.
package main

import (
	"os"
)

func main() {
	os.Exit(run(os.Args[1:], newIO()))
}
