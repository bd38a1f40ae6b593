package main

import (
	"os"
	"os/exec"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"
)

func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"bernstein": func() { os.Exit(run(os.Args[1:], newIO())) },
	})
}

// TestScripts runs the end-to-end scenarios in testdata/script/*.txtar
// against the real binary and real git.
func TestScripts(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("git is required")
	}
	testscript.Run(t, testscript.Params{
		Dir: "testdata/script",
		Setup: func(env *testscript.Env) error {
			env.Setenv("BERNSTEIN_HOME", env.WorkDir+"/.home")
			env.Setenv("BERNSTEIN_FORCE_TTY", "0")
			env.Setenv("HOME", env.WorkDir)
			env.Setenv("GIT_CONFIG_NOSYSTEM", "1")
			return nil
		},
	})
}
