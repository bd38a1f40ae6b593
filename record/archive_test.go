package record

import (
	"strings"
	"testing"
)

func TestParseArchive(t *testing.T) {
	j, l := strings.Repeat("a", 40), strings.Repeat("b", 40)
	good := `{"add":[{"journal":"` + j + `","journal_rows":3,"ledger":"` + l + `","ledger_rows":4,"task_id":"T-1"}],"prev":"sha256:` + strings.Repeat("c", 64) + `","remove":["T-0"],"seq":2,"v":1,"writer":"w"}`
	a, err := ParseArchive([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if a.Seq != 2 || a.Writer != "w" || len(a.Add) != 1 || a.Add[0].Journal != j || a.Add[0].LedgerRows != 4 || len(a.Remove) != 1 {
		t.Fatalf("parsed %+v", a)
	}
	if got := string(MustCanonical(a)); got != good {
		t.Fatalf("canonical form:\n%s\nwant\n%s", got, good)
	}
	bad := map[string]string{
		"no remove list":       strings.Replace(good, `"remove":["T-0"],`, ``, 1),
		"add out of order":     strings.Replace(good, `"add":[{`, `"add":[{"journal":"`+j+`","journal_rows":1,"ledger":"`+l+`","ledger_rows":1,"task_id":"T-9"},{`, 1),
		"removed and added":    strings.Replace(good, `"remove":["T-0"]`, `"remove":["T-1"]`, 1),
		"remove out of order":  strings.Replace(good, `"remove":["T-0"]`, `"remove":["T-2","T-0"]`, 1),
		"short head":           strings.Replace(good, j, j[:39], 1),
		"upper-case head":      strings.Replace(good, j, strings.ToUpper(j), 1),
		"zero head":            strings.Replace(good, j, strings.Repeat("0", 40), 1),
		"no rows":              strings.Replace(good, `"journal_rows":3`, `"journal_rows":0`, 1),
		"negative seq":         strings.Replace(good, `"seq":2`, `"seq":-1`, 1),
		"no writer":            strings.Replace(good, `"writer":"w"`, `"writer":""`, 1),
		"other version":        strings.Replace(good, `"v":1`, `"v":2`, 1),
		"unknown field":        strings.Replace(good, `"v":1,`, `"v":1,"x":1,`, 1),
		"repeated task in add": strings.Replace(good, `"add":[{`, `"add":[{"journal":"`+j+`","journal_rows":1,"ledger":"`+l+`","ledger_rows":1,"task_id":"T-1"},{`, 1),
	}
	for name, b := range bad {
		if _, err := ParseArchive([]byte(b)); err == nil {
			t.Errorf("%s: accepted %s", name, b)
		}
	}
}
