#!/usr/bin/env bash
# The README's demo: a fresh repository in a temporary folder, a task, a
# claim, three artifact types, a repost, and the verified listing.
set -euo pipefail
bin=${BERNSTEIN_BIN:-./bin/bernstein}
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
work=$(mktemp -d "${TMPDIR:-/tmp}/bernstein-demo.XXXXXX")
export BERNSTEIN_HOME="$work/home"   # the writer's keys: outside the repository
export BERNSTEIN_REPO="$work/repo"
export BERNSTEIN_FORCE_TTY=1      # tables, as on a terminal
step() { printf '\n\033[1m$ %s\033[0m\n' "$*"; }
run() { step "$*"; "$@"; }

run "$bin" init --writer demo-writer
run "$bin" task create DEMO-1 --title "Tune the query planner" --gate smoke="echo 'query plan ok'"
step 'TOKEN=$(bernstein task claim DEMO-1 --agent planner-agent)'
TOKEN=$("$bin" task claim DEMO-1 --agent planner-agent)
export BERNSTEIN_AGENT=planner-agent BERNSTEIN_CLAIM_TOKEN="$TOKEN"
printf '# Findings\n\nThe planner picks a nested loop for `orders` joins.\n' > "$work/report.md"
run "$bin" artifact post DEMO-1 summary --type report --body-file "$work/report.md"
printf 'query,before_ms,after_ms\nq1,840,120\nq2,310,95\n' > "$work/timings.csv"
run "$bin" artifact post DEMO-1 timings --type table --csv "$work/timings.csv"
run "$bin" artifact post DEMO-1 dashboard --type link --url https://grafana.example.com/d/planner --kind dashboard
printf '# Findings (revised)\n\nHash join for `orders`: 7x faster on q1.\n' > "$work/report.md"
run "$bin" artifact post DEMO-1 summary --type report --body-file "$work/report.md"
step "bernstein artifact post DEMO-1 summary ... (as another agent: refused)"
BERNSTEIN_AGENT=intruder "$bin" artifact post DEMO-1 summary --type report --body "not mine" || echo "(exit $?: refused and recorded in the audit mirror)"
run "$bin" artifact list DEMO-1
run "$bin" artifact show DEMO-1 summary
run "$bin" artifact list

# Progress is earned by recorded work, never posted.
printf 'join = hash\n' > "$BERNSTEIN_REPO/planner.conf"
git -C "$BERNSTEIN_REPO" add planner.conf
git -C "$BERNSTEIN_REPO" -c user.name=demo -c user.email=demo@example.com commit -q -m "planner: prefer hash joins"
run "$bin" task start DEMO-1
run "$bin" checkpoint DEMO-1
run "$bin" gate run DEMO-1 smoke
run "$bin" task progress DEMO-1
run "$bin" task complete DEMO-1
run "$bin" audit verify
step "git -C $BERNSTEIN_REPO log --oneline refs/bernstein/journal/DEMO-1"
git -C "$BERNSTEIN_REPO" log --oneline refs/bernstein/journal/DEMO-1
# Each journal commit holds its own row's files: summary v2 sits at the commit
# of its row (journal index 3 of 6, so two commits below the head).
step "git -C $BERNSTEIN_REPO show refs/bernstein/journal/DEMO-1~2:artifacts/summary/v2.json"
git -C "$BERNSTEIN_REPO" show refs/bernstein/journal/DEMO-1~2:artifacts/summary/v2.json; echo
step "git fsck --strict"
git -C "$BERNSTEIN_REPO" fsck --strict --no-dangling 2>&1 | grep -v 'unborn branch' || true
printf '\nThe demo repository is %s (keys in %s).\n' "$BERNSTEIN_REPO" "$BERNSTEIN_HOME"
printf 'To watch it live: BERNSTEIN_HOME=%s %s serve --repo %s  (then open the URL it prints)\n' "$BERNSTEIN_HOME" "$bin" "$BERNSTEIN_REPO"
