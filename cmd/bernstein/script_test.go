package main

import (
	"errors"
	"os"
	"os/exec"
	"strconv"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/bernstein/bernstein/internal/servecmd"
	"github.com/bernstein/bernstein/internal/testbin"
)

func TestMain(m *testing.M) {
	// The test process must not become bernstein-serve: serve and mcp
	// --http run as a program (a script's bernstein, or the built binary).
	execServer = func([]string) error {
		return errors.New("serve ran in the test process: run it through a binary")
	}
	testscript.Main(m, map[string]func(){
		"bernstein": func() {
			execServer = servecmd.Exec
			os.Exit(run(os.Args[1:], newIO()))
		},
	})
}

// TestScripts runs the end-to-end scenarios in testdata/script/*.txtar
// against the real binary and real git.
func TestScripts(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("git is required")
	}
	serveBin, err := testbin.ServePath()
	if err != nil {
		t.Fatal(err)
	}
	testscript.Run(t, testscript.Params{
		Dir: "testdata/script",
		Setup: func(env *testscript.Env) error {
			// A script's bernstein is this test binary: it finds
			// bernstein-serve on PATH, in a directory holding only it.
			serveDir := env.WorkDir + "/.serve-bin"
			if err := os.Mkdir(serveDir, 0o755); err != nil {
				return err
			}
			if err := os.Symlink(serveBin, serveDir+"/"+testbin.ServeProgram); err != nil {
				return err
			}
			env.Setenv("PATH", serveDir+string(os.PathListSeparator)+env.Getenv("PATH"))
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
