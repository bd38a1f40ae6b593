#!/usr/bin/env bash
# End-to-end tests with a real MCP client this project did not write: the
# official TypeScript SDK (pinned in e2e/mcp/package-lock.json) drives the
# bernstein binary over stdio and streamable HTTP under `node --test`.
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

${GO:-go} build -o bin/bernstein ./cmd/bernstein

# Install the pinned client when node_modules is missing or older than the lock.
e2e=e2e/mcp
if [ ! -f "$e2e/node_modules/.package-lock.json" ] || [ "$e2e/package-lock.json" -nt "$e2e/node_modules/.package-lock.json" ]; then
  (cd "$e2e" && npm ci --no-audit --no-fund)
fi

cd "$e2e"
BERNSTEIN_BIN="$root/bin/bernstein" node --test ./*.test.mjs
