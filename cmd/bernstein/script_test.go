package main

import (
	"errors"
	"os"
	"os/exec"
	"strconv"
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
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"exitcode": cmdExitcode,
		},
	})
}

// cmdExitcode is `exitcode N program [args...]`: it runs program like exec
// (its stdout and stderr are then checked with stdout and stderr) and fails
// unless the program exits with status N exactly. `! exec` only says
// "non-zero"; the documented statuses (1 error, 2, 3 refused, 4 failed) are
// part of the interface, so scenarios pin them with exitcode.
func cmdExitcode(ts *testscript.TestScript, neg bool, args []string) {
	if neg {
		ts.Fatalf("unsupported: ! exitcode (name the status instead)")
	}
	if len(args) < 2 {
		ts.Fatalf("usage: exitcode N program [args...]")
	}
	want, err := strconv.Atoi(args[0])
	if err != nil || want < 0 {
		ts.Fatalf("exitcode: invalid status %q", args[0])
	}
	got := 0
	if err := ts.Exec(args[1], args[2:]...); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			ts.Fatalf("exitcode: %v", err)
		}
		got = ee.ExitCode()
	}
	if got != want {
		ts.Fatalf("%s exited with status %d, want %d", args[1], got, want)
	}
}
