// End to end: the official TypeScript MCP SDK drives the bernstein binary
// over stdio (`bernstein mcp`) and over streamable HTTP (`bernstein mcp
// --http` and `bernstein serve`). The binary comes from BERNSTEIN_BIN; every
// test works in its own temporary repository, checked with plain git.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ProgressNotificationSchema, ResourceListChangedNotificationSchema, ResourceUpdatedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import { AjvJsonSchemaValidator } from '@modelcontextprotocol/sdk/validation/ajv';
import { UriTemplate } from '@modelcontextprotocol/sdk/shared/uriTemplate.js';

const BIN = process.env.BERNSTEIN_BIN;
if (!BIN) {
  throw new Error('BERNSTEIN_BIN must name the bernstein binary (scripts/test-e2e.sh sets it)');
}

const WRITER = 'e2e-writer';
const POST = 'bernstein_post_artifact';
const HANDLE = 'bernstein_task_handle';

// A temporary repository with a writer identity and a commit to checkpoint
// (one with a tree of its own: only a new tree earns a step).
function workspace(t) {
  const dir = mkdtempSync(join(tmpdir(), 'bernstein-e2e-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const env = { ...process.env };
  for (const k of ['BERNSTEIN_AGENT', 'BERNSTEIN_CLAIM_TOKEN', 'BERNSTEIN_ALLOWED_SIGNERS']) delete env[k];
  Object.assign(env, {
    BERNSTEIN_HOME: join(dir, 'home'),
    BERNSTEIN_REPO: join(dir, 'repo'),
    HOME: dir,
    GIT_CONFIG_NOSYSTEM: '1',
    GIT_AUTHOR_NAME: 'e2e', GIT_AUTHOR_EMAIL: 'e2e@example.com',
    GIT_COMMITTER_NAME: 'e2e', GIT_COMMITTER_EMAIL: 'e2e@example.com',
  });
  const repo = env.BERNSTEIN_REPO;
  const run = (cmd, args) => execFileSync(cmd, args, { env, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  const ws = {
    dir, env, repo,
    cli: (...args) => run(BIN, args),
    git: (...args) => run('git', ['-C', repo, ...args]),
  };
  ws.cli('init', '--writer', WRITER);
  writeFileSync(join(repo, 'work.txt'), 'first\n');
  ws.git('add', 'work.txt');
  ws.git('commit', '-q', '-m', 'first');
  return ws;
}

// The newest entry of the writer's audit mirror, as plain git shows it.
function lastAudit(ws) {
  const msg = ws.git('log', '-1', '--format=%B', `refs/bernstein/audit/${WRITER}`);
  return JSON.parse(msg.trim().split('\n\n')[1]);
}

function refValue(ws, ref) {
  return ws.git('rev-parse', ref).trim();
}

// RFC 8785 canonical JSON for the values the handle carries (strings,
// integers, booleans, objects): sorted keys, no white space.
function canonical(v) {
  if (v === null || typeof v !== 'object') return JSON.stringify(v);
  if (Array.isArray(v)) return `[${v.map(canonical).join(',')}]`;
  return `{${Object.keys(v).sort().map((k) => `${JSON.stringify(k)}:${canonical(v[k])}`).join(',')}}`;
}

const sha256 = (s) => createHash('sha256').update(s, 'utf8').digest('hex');

const VECTOR_FIELDS = ['schema_version', 'task_id', 'checkpoints', 'diffs_captured', 'gate_attempts', 'gates_passed',
  'evidence_declared', 'evidence_passed', 'ledger_phase', 'ledger_attempts', 'terminal'];

function textOf(result) {
  return result.content.filter((c) => c.type === 'text').map((c) => c.text).join('');
}

async function newClient(transport) {
  const client = new Client({ name: 'bernstein-e2e', version: '1.0.0' });
  // Every progress notification is recorded by its token. (The SDK's own
  // per-request onprogress drops a notification that arrives together with
  // its response: typescript-sdk issue 2580.)
  client.progressNotes = [];
  client.setNotificationHandler(ProgressNotificationSchema, (n) => { client.progressNotes.push(n.params); });
  // Resource notifications, and whoever waits for one.
  client.updated = [];
  client.listChanged = 0;
  client.waiters = [];
  client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => {
    client.updated.push(n.params.uri);
    client.waiters = client.waiters.filter((w) => !w());
  });
  client.setNotificationHandler(ResourceListChangedNotificationSchema, () => { client.listChanged++; });
  await client.connect(transport);
  // Listing caches the output schemas: from here on the SDK validates every
  // structured result against what the server advertised.
  await client.listTools();
  return client;
}

// --- transports --------------------------------------------------------

// stdio: one `bernstein mcp` process per agent and its claim token.
function stdioConnector(t, ws) {
  return async (agent, token) => {
    const transport = new StdioClientTransport({
      command: BIN,
      args: ['mcp', '--agent', agent, ...(token ? ['--claim-token', token] : [])],
      env: ws.env,
      stderr: 'pipe',
    });
    const client = await newClient(transport);
    t.after(() => client.close());
    return client;
  };
}

// HTTP: one server process; every client carries its bearer claim token.
async function httpServer(t, ws, args) {
  const child = spawn(BIN, args, { env: ws.env, stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
  const url = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no URL on stderr: ${stderr}`)), 20000);
    child.stderr.on('data', (d) => {
      stderr += d;
      const m = stderr.match(/(http:\/\/127\.0\.0\.1:\d+\/mcp)\b/);
      if (m) { clearTimeout(timer); resolve(m[1]); }
    });
    child.on('exit', (code) => reject(new Error(`${args.join(' ')} exited ${code}: ${stderr}`)));
  });
  const stop = async () => {
    child.kill('SIGTERM');
    return exited;
  };
  t.after(() => { if (child.exitCode === null) child.kill('SIGKILL'); });
  return { url, stop, stderr: () => stderr };
}

function httpConnector(t, server) {
  return async (_agent, token) => {
    const transport = new StreamableHTTPClientTransport(new URL(server.url), {
      requestInit: { headers: { Authorization: `Bearer ${token}` } },
    });
    const client = await newClient(transport);
    t.after(() => client.close());
    return client;
  };
}

// --- the checks, the same over every transport --------------------------

async function checkAdvertisedSchema(client) {
  const { tools } = await client.listTools();
  assert.deepEqual(tools.map((x) => x.name).sort(), [POST, HANDLE], 'two tools, none that sets progress');
  const post = tools.find((x) => x.name === POST);
  const s = post.inputSchema;
  assert.equal(s.type, 'object');
  assert.equal(s.additionalProperties, false);
  assert.deepEqual(s.required, ['task_id', 'key', 'artifact_type']);
  assert.deepEqual(s.properties.artifact_type.enum, ['report', 'table', 'link']);
  assert.deepEqual(s.properties.link_kind.enum, ['preview', 'dashboard', 'document']);
  assert.equal(s.properties.key.pattern, '^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$');
  assert.equal(s.properties.task_id.pattern, '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$');
  assert.equal(s.properties.columns.maxItems, 64);
  assert.equal(s.properties.rows.maxItems, 4096);
  assert.equal(s.properties.rows.items.items.maxLength, 4096);
  assert.equal(s.properties.url.maxLength, 4096);
  const branches = Object.fromEntries(s.oneOf.map((b) => [b.properties.artifact_type.const, b.required]));
  assert.deepEqual(branches, { report: ['body'], table: ['columns', 'rows'], link: ['url', 'link_kind'] });
  assert.ok(post.outputSchema, 'the post advertises its output');
  const handle = tools.find((x) => x.name === HANDLE);
  assert.deepEqual(Object.keys(handle.inputSchema.properties), ['task_id'], 'the handle takes task_id alone');
  assert.deepEqual(handle.outputSchema.properties.status.enum, ['working', 'input_required', 'completed', 'failed', 'cancelled']);

  // The SDK's own validator reads the per-type rules out of the schema.
  const validate = new AjvJsonSchemaValidator().getValidator(s);
  const args = (type, extra) => ({ task_id: 'T-1', key: 'k', artifact_type: type, ...extra });
  const cases = [
    [args('report', { body: '# hi' }), true],
    [args('table', { columns: ['a', 'b'], rows: [['1', '2']] }), true],
    [args('link', { url: 'https://example.com/x', link_kind: 'preview' }), true],
    [args('report', {}), false],
    [args('report', { body: 'x', url: 'https://example.com' }), false],
    [args('table', { columns: ['a'] }), false],
    [args('table', { columns: Array.from({ length: 65 }, (_, i) => `c${i}`), rows: [] }), false],
    [args('link', { url: 'ftp://example.com', link_kind: 'preview' }), false],
    [args('link', { url: 'https://example.com', link_kind: 'video' }), false],
    [args('pdf', { body: 'x' }), false],
    [{ ...args('report', { body: 'x' }), agent: 'someone' }, false],
    [{ ...args('report', { body: 'x' }), key: 'no spaces' }, false],
  ];
  for (const [a, want] of cases) {
    assert.equal(validate(a).valid, want, `schema verdict on ${JSON.stringify(a)}`);
  }
}

// call calls a tool, with a progress token when one is given.
async function call(client, name, args, progressToken) {
  const params = { name, arguments: args };
  if (progressToken !== undefined) params._meta = { progressToken };
  return client.callTool(params);
}

// notesFor returns the progress notifications received for token, once the
// messages already read have been dispatched.
async function notesFor(client, token) {
  await new Promise((resolve) => setImmediate(resolve));
  return client.progressNotes.filter((n) => n.progressToken === token);
}

async function postOK(client, args, progressToken) {
  const res = await call(client, POST, args, progressToken);
  assert.ok(!res.isError, `post refused: ${textOf(res)}`);
  assert.deepEqual(JSON.parse(textOf(res)), res.structuredContent, 'text content is the structured JSON');
  return res.structuredContent;
}

async function checkPosts(ws, client, agent) {
  const report = await postOK(client, { task_id: 'T-1', key: 'summary', artifact_type: 'report', body: '# Findings\n\nv1' });
  assert.equal(report.version, 1);
  assert.equal(report.type, 'report');
  assert.equal(report.agent, agent);
  assert.match(report.content_hash, /^sha256:[0-9a-f]{64}$/);
  assert.match(report.spine_entry_hash, /^sha256:[0-9a-f]{64}$/);
  assert.equal(report.prev_version_hash, '');
  assert.equal(typeof report.journal_index, 'number');
  // The content hash is sha256 of the stored blob, which plain git shows.
  const blob = ws.git('show', 'refs/bernstein/journal/T-1:artifacts/summary/v1.json');
  assert.equal(`sha256:${sha256(blob)}`, report.content_hash);
  assert.deepEqual(JSON.parse(blob), { v: 1, type: 'report', body: '# Findings\n\nv1' });

  const table = await postOK(client, {
    task_id: 'T-1', key: 'timings', artifact_type: 'table', columns: ['query', 'ms'], rows: [['q1', '120'], ['q2', '95']],
  });
  assert.equal(table.type, 'table');
  assert.equal(table.version, 1);
  assert.equal(table.journal_index, report.journal_index + 1);

  const link = await postOK(client, {
    task_id: 'T-1', key: 'board', artifact_type: 'link', url: 'https://grafana.example.com/d/1', link_kind: 'dashboard',
  });
  assert.equal(link.type, 'link');
  assert.equal(link.link_kind, 'dashboard');

  const again = await postOK(client, { task_id: 'T-1', key: 'summary', artifact_type: 'report', body: '# Findings\n\nv2' });
  assert.equal(again.version, 2, 'a repost is version 2');
  assert.equal(again.prev_version_hash, report.spine_entry_hash, 'version 2 chains to version 1');
  assert.match(ws.git('show', 'refs/bernstein/journal/T-1:artifacts/summary/v2.json'), /v2/);

  const listed = JSON.parse(ws.cli('artifact', 'list', 'T-1', '--output-json'));
  const states = listed.artifacts.map((a) => `${a.key} v${a.version} ${a.state}`).sort();
  assert.deepEqual(states, ['board v1 verified', 'summary v1 verified', 'summary v2 verified', 'timings v1 verified']);

  // Bad input names the field; nothing is written.
  const journal = refValue(ws, 'refs/bernstein/journal/T-1');
  const bad = await call(client, POST, { task_id: 'T-1', key: 'summary', artifact_type: 'report', body: 'x', url: 'https://example.com' });
  assert.equal(bad.isError, true);
  assert.match(textOf(bad), /^invalid url: /);
  const badCell = await call(client, POST, { task_id: 'T-1', key: 't', artifact_type: 'table', columns: ['a', 'b'], rows: [['1']] });
  assert.match(textOf(badCell), /^invalid rows\[0\]: /);
  assert.equal(refValue(ws, 'refs/bernstein/journal/T-1'), journal);

  // An unknown tool is a protocol error, not a tool result.
  await assert.rejects(call(client, 'bernstein_set_progress', { task_id: 'T-1' }), (err) => err.code === -32602 && /unknown tool/.test(err.message));
}

async function checkRefusal(ws, intruder, agent) {
  const journal = refValue(ws, 'refs/bernstein/journal/T-1');
  const spine = refValue(ws, `refs/bernstein/spine/${WRITER}`);
  const audit = refValue(ws, `refs/bernstein/audit/${WRITER}`);
  const res = await call(intruder, POST, { task_id: 'T-1', key: 'summary', artifact_type: 'report', body: 'not mine' });
  assert.equal(res.isError, true, 'a caller without the claim gets a tool error');
  assert.equal(res.structuredContent, undefined);
  assert.match(textOf(res), /refused \(claim_scope_violation\)/);
  const entry = lastAudit(ws);
  assert.equal(entry.event, 'artifact.refused');
  assert.equal(entry.actor, agent);
  assert.equal(entry.task_id, 'T-1');
  assert.equal(entry.details.reason, 'claim_scope_violation');
  assert.equal(entry.resource, 'bernstein://T-1/summary');
  // Only the audit mirror moved, by one entry.
  assert.equal(refValue(ws, 'refs/bernstein/journal/T-1'), journal);
  assert.equal(refValue(ws, `refs/bernstein/spine/${WRITER}`), spine);
  assert.equal(refValue(ws, `refs/bernstein/audit/${WRITER}~1`), audit);
}

async function readHandle(client, progressToken) {
  const res = await call(client, HANDLE, { task_id: 'T-1' }, progressToken);
  assert.ok(!res.isError, textOf(res));
  const h = res.structuredContent;
  assert.deepEqual(Object.keys(h).sort(), ['journalHead', 'progress', 'progressHash', 'receiptHash', 'spineHead', 'status', 'taskId']);
  assert.equal(h.taskId, 'T-1');
  assert.equal(h.progressHash, h.progress.vector_hash);
  // Recomputed here, by a second implementation of the canonical form.
  const vector = Object.fromEntries(VECTOR_FIELDS.map((f) => [f, h.progress[f]]));
  assert.equal(sha256(canonical(vector)), h.progressHash, 'progressHash is sha256 of the canonical vector');
  const { receiptHash, ...body } = h;
  assert.equal(`sha256:${sha256(canonical(body))}`, receiptHash, 'receiptHash covers every other field');
  return h;
}

async function checkHandleAndProgress(ws, client) {
  const h0 = await readHandle(client, 'h0');
  assert.equal(h0.status, 'working');
  assert.equal(h0.progress.evidence_declared, 1);
  const earned0 = h0.progress.earned_steps;

  ws.cli('checkpoint', 'T-1');
  const h1 = await readHandle(client, 'h1');
  assert.notEqual(h1.progressHash, h0.progressHash, 'a checkpoint moves the vector');
  assert.equal(h1.progress.checkpoints, h0.progress.checkpoints + 1);
  assert.equal(h1.progress.earned_steps, earned0 + 1);
  const advance = await notesFor(client, 'h1');
  assert.equal(advance.length, 1, 'one progress notification for the advance');
  assert.equal(advance[0].progress, earned0 + 1, 'progress = earned steps');
  assert.equal(advance[0].total, 1, 'total = declared gates and evidence (one producer)');

  for (let i = 0; i < 50; i++) {
    await postOK(client, { task_id: 'T-1', key: `note-${i % 5}`, artifact_type: 'report', body: `report ${i}` }, `p${i}`);
  }
  const h2 = await readHandle(client, 'h2');
  assert.equal(h2.progressHash, h1.progressHash, 'fifty reports leave the vector alone');
  assert.notEqual(h2.journalHead, h1.journalHead, 'the journal grew');
  assert.notEqual(h2.receiptHash, h1.receiptHash);
  assert.equal(h2.progress.journal_rows, h1.progress.journal_rows + 50);

  // The next advance (a checkpoint of a commit with a new tree: a tree
  // counts once) is reported on a post too; it is the only other one.
  writeFileSync(join(ws.repo, 'work.txt'), 'second\n');
  ws.git('commit', '-q', '-am', 'second');
  ws.cli('checkpoint', 'T-1');
  await postOK(client, { task_id: 'T-1', key: 'note-0', artifact_type: 'report', body: 'after the second checkpoint' }, 'p50');
  const second = (await notesFor(client, 'p50'))[0];
  assert.equal(second?.progress, earned0 + 2);
  assert.equal(second?.total, undefined, 'no total below the progress');
  assert.deepEqual(client.progressNotes.map((n) => n.progressToken), ['h1', 'p50'],
    'no progress notification for h0 (nothing earned), the fifty reports or h2 (nothing moved)');
}

// Sets up T-1 (claimed by agent-1, one declared evidence producer) and
// T-OTHER (claimed by intruder), and runs every check through connect.
async function exercise(ws, connect) {
  ws.cli('task', 'create', 'T-1', '--title', 'End to end', '--evidence', 'unit=true');
  const token = ws.cli('task', 'claim', 'T-1', '--agent', 'agent-1').trim();
  ws.cli('task', 'create', 'T-OTHER', '--title', 'Someone else');
  const otherToken = ws.cli('task', 'claim', 'T-OTHER', '--agent', 'intruder').trim();

  const client = await connect('agent-1', token);
  await checkAdvertisedSchema(client);
  await checkPosts(ws, client, 'agent-1');
  await checkRefusal(ws, await connect('intruder', otherToken), 'intruder');
  await checkHandleAndProgress(ws, client);
  return { client, token };
}

// --- the tests -----------------------------------------------------------

test('stdio: bernstein mcp --agent with the claim token', async (t) => {
  const ws = workspace(t);
  const connect = stdioConnector(t, ws);
  const { client } = await exercise(ws, connect);

  // An agent with no token at all is refused too, and audited.
  await checkRefusal(ws, await connect('intruder'), 'intruder');

  // A released claim stops working at once, in the same session.
  ws.cli('task', 'release', 'T-1');
  const res = await call(client, POST, { task_id: 'T-1', key: 'summary', artifact_type: 'report', body: 'late' });
  assert.equal(res.isError, true);
  assert.match(textOf(res), /refused \(unclaimed_task\)/);
  assert.equal(lastAudit(ws).event, 'artifact.refused');
});

for (const [name, args] of [
  ['mcp --http', ['mcp', '--http', '127.0.0.1:0']],
  ['serve', ['serve', '--addr', '127.0.0.1:0']],
]) {
  test(`http: bernstein ${name} with bearer claim tokens`, async (t) => {
    const ws = workspace(t);
    const server = await httpServer(t, ws, args);
    const connect = httpConnector(t, server);
    const { client, token } = await exercise(ws, connect);

    // No live claim token, no session: 401.
    const noAuth = await fetch(server.url, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'raw', version: '1' } } }),
    });
    assert.equal(noAuth.status, 401);
    assert.match(noAuth.headers.get('www-authenticate') ?? '', /^Bearer/);
    await assert.rejects(connect('agent-1', 'bct_not-a-claim-token'));

    // Completed: the token stops working on the next request.
    ws.cli('task', 'start', 'T-1');
    await postOK(client, { task_id: 'T-1', key: 'summary', artifact_type: 'report', body: 'before completion' });
    ws.cli('task', 'complete', 'T-1');
    await assert.rejects(call(client, POST, { task_id: 'T-1', key: 'summary', artifact_type: 'report', body: 'late' }), /401|Unauthorized|no live claim/);
    await assert.rejects(connect('agent-1', token));

    const { code, signal } = await server.stop();
    assert.equal(code, 0, `the server exits 0 on SIGTERM (signal ${signal}): ${server.stderr()}`);
  });
}

// --- resources -------------------------------------------------------------

// waitUpdated resolves once notifications/resources/updated named uri
// (count times in all), or fails after 20 s.
function waitUpdated(client, uri, count = 1) {
  return new Promise((resolve, reject) => {
    const done = () => {
      if (client.updated.filter((u) => u === uri).length >= count) { clearTimeout(timer); resolve(); return true; }
      return false;
    };
    const timer = setTimeout(() => reject(new Error(`no notifications/resources/updated for ${uri}: got ${client.updated}`)), 20000);
    if (!done()) client.waiters.push(done);
  });
}

// The payload bytes of a version, read with plain git from its row's commit.
function payloadBytes(ws, task, key, v) {
  const path = `artifacts/${key}/v${v}.json`;
  for (const c of ws.git('rev-list', `refs/bernstein/journal/${task.replaceAll(':', '%3A')}`).trim().split('\n')) {
    if (ws.git('ls-tree', '-r', '--name-only', c).split('\n').includes(path)) return ws.git('cat-file', 'blob', `${c}:${path}`);
  }
  throw new Error(`no commit holds ${path}`);
}

// Versions as resources: list, templates, read (re-verified), subscribe to a
// key and to the task, the update a post by another process (the CLI)
// sends, the claim scope, and a tampered version's error.
async function checkResources(ws, connect) {
  ws.cli('task', 'create', 'T-R', '--title', 'Resources');
  const token = ws.cli('task', 'claim', 'T-R', '--agent', 'agent-1').trim();
  ws.cli('task', 'create', 'T-X', '--title', 'Not yours');
  const other = ws.cli('task', 'claim', 'T-X', '--agent', 'agent-2').trim();
  ws.cli('artifact', 'post', 'T-X', 'secret', '--type', 'report', '--body', 'not for agent-1', '--agent', 'agent-2', '--claim-token', other);
  const client = await connect('agent-1', token);
  assert.ok(client.getServerCapabilities().resources?.subscribe, 'the server offers resource subscriptions');

  const res = await call(client, POST, { task_id: 'T-R', key: 'notes', artifact_type: 'report', body: '# one' });
  assert.ok(!res.isError, textOf(res));
  const link = res.content.find((c) => c.type === 'resource_link');
  assert.deepEqual(link && { uri: link.uri, mimeType: link.mimeType }, { uri: 'bernstein://T-R/notes/v1', mimeType: 'application/json' },
    'the post result links the new version');

  const { resources } = await client.listResources();
  assert.deepEqual(resources.map((r) => r.uri), ['bernstein://T-R/notes/v1'], 'only the claimed task\'s versions');
  const { resourceTemplates } = await client.listResourceTemplates();
  assert.deepEqual(resourceTemplates.map((r) => r.uriTemplate).sort(), ['bernstein:///{task}/{key}/latest', 'bernstein:///{task}/{key}/v{version}',
    'bernstein://{task}/{key}/latest', 'bernstein://{task}/{key}/v{version}']);

  const read = await client.readResource({ uri: 'bernstein://T-R/notes/v1' });
  const c0 = read.contents[0];
  assert.equal(c0.mimeType, 'application/json');
  assert.equal(c0.text, payloadBytes(ws, 'T-R', 'notes', 1), 'the payload, byte for byte as git holds it');
  assert.equal(JSON.parse(c0.text).body, '# one');
  assert.equal(c0._meta.state, 'verified');
  assert.equal(c0._meta.content_hash, `sha256:${sha256(c0.text)}`);

  await client.subscribeResource({ uri: 'bernstein://T-R/notes/latest' });
  await client.subscribeResource({ uri: 'bernstein://T-R' });
  // A post by another process: the CLI.
  ws.cli('artifact', 'post', 'T-R', 'notes', '--type', 'report', '--body', '# two', '--agent', 'agent-1', '--claim-token', token);
  await waitUpdated(client, 'bernstein://T-R/notes/latest');
  await waitUpdated(client, 'bernstein://T-R');
  assert.deepEqual((await client.listResources()).resources.map((r) => r.uri), ['bernstein://T-R/notes/v1', 'bernstein://T-R/notes/v2']);
  assert.equal(JSON.parse((await client.readResource({ uri: 'bernstein://T-R/notes/latest' })).contents[0].text).body, '# two');
  // And by this session: the update arrives before the post's result.
  await postOK(client, { task_id: 'T-R', key: 'table', artifact_type: 'table', columns: ['a'], rows: [['1']] });
  assert.equal(client.updated.filter((u) => u === 'bernstein://T-R').length, 2);
  assert.ok(!client.updated.includes('bernstein://T-R/table/latest'), 'no update for a key nobody subscribed to');

  // The claim scope: another task is neither read nor followed.
  await assert.rejects(client.readResource({ uri: 'bernstein://T-X/secret/latest' }), /claim scope/);
  await assert.rejects(client.readResource({ uri: 'bernstein://T-X/secret/v1' }), /not found/i);
  await assert.rejects(client.subscribeResource({ uri: 'bernstein://T-X' }), /claim scope/);
  await assert.rejects(client.subscribeResource({ uri: 'bernstein://T-R/notes/v1' }), /never changes/);

  // A tampered version is an error, never content: the head row's commit
  // rewritten without its signature.
  const head = refValue(ws, 'refs/bernstein/journal/T-R');
  const body = ws.git('cat-file', 'commit', head).replace(/gpgsig [\s\S]*?-----END SSH SIGNATURE-----\n/, '');
  const forged = execFileSync('git', ['-C', ws.repo, 'hash-object', '-t', 'commit', '-w', '--stdin'], { env: ws.env, input: body, encoding: 'utf8' }).trim();
  ws.git('update-ref', 'refs/bernstein/journal/T-R', forged);
  await assert.rejects(client.readResource({ uri: 'bernstein://T-R/table/v1' }), /tampered/);
  await assert.rejects(client.readResource({ uri: 'bernstein://T-R/table/latest' }), /tampered/);
  // Closed here, before the workspace goes: a stdio server that subscribes
  // reads the refs until its session ends.
  await client.close();
}

// A task whose id holds ':' (build:lint): its URIs are what the SDK's own
// RFC 6570 implementation expands the advertised template to; they are
// listed, read, followed (the update a CLI post sends) and unsubscribed;
// another task is refused in any spelling as in its own.
async function checkColonResources(ws, connect) {
  ws.cli('task', 'create', 'build:lint', '--title', 'Lint');
  const token = ws.cli('task', 'claim', 'build:lint', '--agent', 'agent-1').trim();
  ws.cli('task', 'create', 'build:test', '--title', 'Not yours');
  const other = ws.cli('task', 'claim', 'build:test', '--agent', 'agent-2').trim();
  ws.cli('artifact', 'post', 'build:test', 'secret', '--type', 'report', '--body', 'not for agent-1', '--agent', 'agent-2', '--claim-token', other);
  const client = await connect('agent-1', token);
  // Closed before the workspace goes, even on a failure: a stdio server that
  // subscribes reads the refs until its session ends.
  try {
    const { resourceTemplates } = await client.listResourceTemplates();
    const tmpl = resourceTemplates.find((r) => r.uriTemplate === 'bernstein:///{task}/{key}/latest');
    assert.ok(tmpl, 'a template for task ids with a colon');
    const latest = new UriTemplate(tmpl.uriTemplate).expand({ task: 'build:lint', key: 'notes' });
    assert.equal(latest, 'bernstein:///build%3Alint/notes/latest');
    const v1 = latest.replace(/latest$/, 'v1');
    const parsed = new URL(v1);
    assert.equal(parsed.href, v1, 'a WHATWG URL parser keeps the URI as it is');
    assert.equal(decodeURIComponent(parsed.pathname.split('/')[1]), 'build:lint');

    const res = await call(client, POST, { task_id: 'build:lint', key: 'notes', artifact_type: 'report', body: '# one' });
    assert.ok(!res.isError, textOf(res));
    assert.equal(res.content.find((c) => c.type === 'resource_link')?.uri, v1, 'the post result links the new version');
    assert.deepEqual((await client.listResources()).resources.map((r) => r.uri), [v1]);
    const read = (await client.readResource({ uri: v1 })).contents[0];
    assert.equal(read.uri, v1);
    assert.equal(read.text, payloadBytes(ws, 'build:lint', 'notes', 1), 'the payload, byte for byte as git holds it');
    assert.equal(read._meta.state, 'verified');

    const taskURI = 'bernstein:///build%3Alint';
    await client.subscribeResource({ uri: latest });
    await client.subscribeResource({ uri: taskURI });
    ws.cli('artifact', 'post', 'build:lint', 'notes', '--type', 'report', '--body', '# two', '--agent', 'agent-1', '--claim-token', token);
    await waitUpdated(client, latest);
    await waitUpdated(client, taskURI);
    assert.equal(JSON.parse((await client.readResource({ uri: latest })).contents[0].text).body, '# two');
    assert.deepEqual((await client.listResources()).resources.map((r) => r.uri), [v1, latest.replace(/latest$/, 'v2')]);
    // Unsubscribed from the key, the next post notifies the task alone.
    await client.unsubscribeResource({ uri: latest });
    ws.cli('artifact', 'post', 'build:lint', 'notes', '--type', 'report', '--body', '# three', '--agent', 'agent-1', '--claim-token', token);
    await waitUpdated(client, taskURI, 2);
    assert.equal(client.updated.filter((u) => u === latest).length, 1, 'no update for the unsubscribed key');

    // Another spelling of the caller's own task is refused, naming its URI.
    await assert.rejects(client.subscribeResource({ uri: 'bernstein://build:lint' }), /it is bernstein:\/\/\/build%3Alint$/);
    await assert.rejects(client.readResource({ uri: 'bernstein://build%3Alint/notes/latest' }), /it is bernstein:\/\/\/build%3Alint\/notes\/latest$/);
    // Another task: refused in every spelling exactly as in its own.
    const refusal = async (p) => p.then(() => assert.fail('accepted'), (err) => err.message);
    const scope = await refusal(client.readResource({ uri: 'bernstein:///build%3Atest/secret/latest' }));
    assert.match(scope, /task build:test is outside this caller's claim scope/);
    for (const uri of ['bernstein://build%3Atest/secret/latest', 'bernstein:///build%3atest/secret/latest', 'bernstein:///build%3Atest/s%65cret/latest']) {
      assert.equal(await refusal(client.readResource({ uri })), scope, uri);
    }
    const subScope = await refusal(client.subscribeResource({ uri: 'bernstein:///build%3Atest' }));
    assert.match(subScope, /task build:test is outside this caller's claim scope/);
    for (const uri of ['bernstein://build:test', 'bernstein://build%3Atest', 'bernstein:///build:test']) {
      assert.equal(await refusal(client.subscribeResource({ uri })), subScope, uri);
    }
  } finally {
    await client.close();
  }
}

test('stdio: artifacts as resources', async (t) => {
  const ws = workspace(t);
  const connect = stdioConnector(t, ws);
  // The stdio server lists the tasks of the claims it starts with.
  await checkResources(ws, connect);
});

for (const [name, args] of [
  ['mcp --http', ['mcp', '--http', '127.0.0.1:0']],
  ['serve', ['serve', '--addr', '127.0.0.1:0']],
]) {
  test(`http: bernstein ${name}: artifacts as resources`, async (t) => {
    const ws = workspace(t);
    const server = await httpServer(t, ws, args);
    await checkResources(ws, httpConnector(t, server));
    await server.stop();
  });
}

test('stdio: a task id with a colon as resources', async (t) => {
  const ws = workspace(t);
  await checkColonResources(ws, stdioConnector(t, ws));
});

test('http: bernstein serve: a task id with a colon as resources', async (t) => {
  const ws = workspace(t);
  const server = await httpServer(t, ws, ['serve', '--addr', '127.0.0.1:0']);
  try {
    await checkColonResources(ws, httpConnector(t, server));
  } finally {
    await server.stop();
  }
});
