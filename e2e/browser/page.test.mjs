// End to end: the live task page of `bernstein serve` in a real headless
// browser (Debian's chromium, driven by playwright-core, which downloads no
// browser). Every write comes from a separate bernstein process, as an
// agent's would; the page must show it without a navigation, highlighted,
// bound to the run position that produced it. The binary comes from
// BERNSTEIN_BIN, the browser from CHROMIUM (default /usr/bin/chromium);
// scripts/test-e2e.sh sets both. The screenshots (each view at 1280 and 375
// wide) go to e2e/browser/artifacts/ (git-ignored).
//
// Every wait is a locator or a page condition, never a sleep.

import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { launch, serve, tamperedCopy, taskPath, workspace } from './helpers.mjs';

const HERE = dirname(fileURLToPath(import.meta.url));
const SCREENSHOT = join(HERE, 'artifacts', 'task-page.png');

const WRITER = 'e2e-writer';
// As hostile as the validators allow: a task id with ':' and '.', an agent
// with every punctuation it may carry, keys with runs of '.', '_' and '-'.
const TASK = 'T-1:web.e2e';
const AGENT = 'agent+e2e@evil.example:8080_x-y.z';
const KEY_REPORT = 'summary';
const KEY_TABLE = '0.._-table';
const KEY_LINK = 'z-link..';
const KEY_SECRET = 'secret.-_';
// A task that sorts before TASK (the task list shows a tampered one first
// whatever its id), and one that records every kind of journal row.
const CLEAN = 'A-clean';
const KINDS = 'T-2:kinds';
// A title with markup: it must show as text.
const TITLE = '<img src=x onerror="window.__xss=4"><script>window.__xss=5</script> Ship the <b>page</b>';
// A report with every payload markdown can carry.
const REPORT = [
  '# Findings',
  '',
  '<script>window.__xss=1</script>',
  '',
  '<img src=x onerror="window.__xss=2">',
  '',
  'A [x](javascript:window.__xss=3) and [a safe one](https://example.com/ok).',
  '',
  'Plain **bold** text and ~~struck~~ text.',
  '',
  '| a | b |',
  '|---|---|',
  '| <b onmouseover="window.__xss=6">c</b> | d |',
  '',
].join('\n');
// A table whose header and cells are markup.
const COLUMNS = ['name', '<i onmouseover="window.__xss=7">html</i>', 'note'];
const ROWS = [
  ['<b onmouseover="window.__xss=8">bold</b>', '<img src=x onerror="window.__xss=9">', '</td></tr></table><script>window.__xss=10</script>'],
  ['plain', 'javascript:window.__xss=11', '=HYPERLINK("http://example.com")'],
];
const LINK = 'https://example.com/dash?q="><script>window.__xss=12</script>';
const SECRET_TAIL = `E2E-BODY-${process.pid}-${Date.now()}`;
const SECRET = `SECRET-${SECRET_TAIL}`;

const csvCell = (s) => (/[",\n]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s);
const csv = (rows) => rows.map((r) => r.map(csvCell).join(',')).join('\n') + '\n';

// version selects one version's article by key and number.
const version = (key, n) => `article.version[data-key=${JSON.stringify(key)}][data-version="${n}"]`;
const group = (key) => `section.artifact-group[data-key=${JSON.stringify(key)}]`;

// The limit only stops a hung browser; it asserts no speed (on a loaded
// 2-core machine the whole suite has taken over 120 s).
describe('the live task page in chromium', { timeout: 600_000 }, () => {
  let ws;
  let server;
  let browser;
  let page;
  let token;
  let kindsToken;
  let commit1;
  // The commit of TASK's latest checkpoint: later posts are bound to it
  // (other tasks' work moves HEAD on).
  let lastCheckpoint;
  let navigations = 0;
  const consoleMessages = [];
  const pageErrors = [];
  const dialogs = [];
  const started = Date.now();

  // watch records, on a page, everything that must never happen: dialogs,
  // page errors, CSP violations (as console messages and as
  // securitypolicyviolation events) and main-frame navigations.
  async function watch(p, counter) {
    await p.addInitScript(() => {
      // Every highlight the page shows ('fresh' lasts 2.5 to 4 s), as it
      // is shown: a poll of a loaded browser can miss the class, this
      // record cannot.
      window.__highlighted = [];
      const record = (el) => {
        if (el.nodeType === 1 && el.classList.contains('fresh')) {
          window.__highlighted.push({ id: el.id, key: el.dataset.key, version: el.dataset.version, inserted: el.dataset.inserted,
            vector: el.dataset.vectorHash, earned: el.dataset.earnedSteps });
        }
      };
      new MutationObserver((ms) => {
        for (const m of ms) {
          if (m.type === 'attributes') record(m.target);
          else m.addedNodes.forEach(record);
        }
      }).observe(document, { subtree: true, childList: true, attributes: true, attributeFilter: ['class'] });
      window.__cspViolations = [];
      document.addEventListener('securitypolicyviolation', (e) => {
        window.__cspViolations.push(`${e.violatedDirective} ${e.blockedURI}`);
      });
    });
    p.on('console', (m) => consoleMessages.push({ type: m.type(), text: m.text() }));
    p.on('pageerror', (e) => pageErrors.push(String(e)));
    p.on('dialog', (d) => { dialogs.push(d.message()); d.dismiss().catch(() => {}); });
    if (counter) p.on('framenavigated', (f) => { if (f === p.mainFrame()) counter(); });
    p.setDefaultTimeout(15_000);
  }

  // assertInert checks that no payload ran, anywhere on p.
  async function assertInert(p) {
    const state = await p.evaluate(() => ({
      xss: window.__xss,
      csp: window.__cspViolations,
      scripts: [...document.scripts].map((s) => s.getAttribute('src')),
      handlers: [...document.querySelectorAll('*')].flatMap((el) => [...el.attributes]
        .filter((a) => /^on/i.test(a.name)).map((a) => `${el.tagName} ${a.name}`)),
      badHrefs: [...document.querySelectorAll('[href], [src], [action], [formaction]')]
        .map((el) => el.getAttribute('href') ?? el.getAttribute('src') ?? el.getAttribute('action') ?? el.getAttribute('formaction'))
        .filter((u) => /^\s*(javascript|vbscript|data:text)/i.test(u) || /javascript:/i.test(u)),
      embedded: document.querySelectorAll('main img, main iframe, main object, main embed, main video, main audio, main svg:not(.timeline-chart):not(.line-box)').length,
      // The pages' own forms only: GET to a path of this origin.
      forms: [...document.querySelectorAll('form')].filter((f) => f.getAttribute('method') !== 'get' || !/^\/(?!\/)/.test(f.getAttribute('action') || ''))
        .map((f) => f.outerHTML.slice(0, 120)),
      // The timeline's SVG holds shapes, text and links within the page only.
      svg: [...document.querySelectorAll('svg.timeline-chart *')].filter((el) => !['svg', 'line', 'polyline', 'circle', 'text', 'title', 'a'].includes(el.tagName.toLowerCase())
        || (el.getAttribute('href') ?? '#').charAt(0) !== '#').map((el) => el.tagName),
    }));
    assert.equal(state.xss, undefined, 'window.__xss was set: a payload ran');
    assert.deepEqual(state.csp, [], 'securitypolicyviolation events');
    assert.ok(state.scripts.every((s) => s && s.startsWith('/static/app.js?v=')), `scripts on the page: ${state.scripts}`);
    assert.deepEqual(state.handlers, [], 'event-handler attributes in the DOM');
    assert.deepEqual(state.badHrefs, [], 'javascript: URLs in the DOM');
    assert.equal(state.embedded, 0, 'embedded content in the page');
    assert.deepEqual(state.forms, [], 'forms that are not the pages\' own');
    assert.deepEqual(state.svg, [], 'timeline SVG beyond shapes and in-page links');
    assert.deepEqual(dialogs, [], 'dialogs fired');
    assert.deepEqual(pageErrors, [], 'page errors');
    const csp = consoleMessages.filter((m) => /Content Security Policy|Refused to (execute|load|apply|connect|frame|evaluate)/i.test(m.text));
    assert.deepEqual(csp, [], 'CSP violations reported in the console');
    const script = consoleMessages.filter((m) => m.text.startsWith('bernstein:'));
    assert.deepEqual(script, [], 'warnings of the page script (a fragment fetch failed)');
  }

  // assertNoNavigation: the page was loaded once and never left.
  async function assertNoNavigation() {
    assert.equal(navigations, 1, 'main-frame navigations since the page was opened');
    assert.equal(await page.evaluate(() => window.__e2eMarker), 'still-here', 'the window marker did not survive: the page reloaded');
  }

  async function post(key, ...args) {
    return ws.cliJSON('artifact', 'post', TASK, key, '--agent', AGENT, '--claim-token', token, ...args);
  }

  // assertLive waits for the version of receipt r to be inserted from the
  // stream, highlighted, verified, at its run position, posted by AGENT.
  // highlighted waits until the page has highlighted an element whose
  // record (see watch) has every field of want.
  async function highlighted(want) {
    await page.waitForFunction((w) => window.__highlighted.some((h) => Object.keys(w).every((k) => h[k] === w[k])), want, { polling: 50 });
  }

  async function assertLive(r, checkpoint) {
    const sel = version(r.key, r.version);
    await highlighted({ key: r.key, version: String(r.version), inserted: 'live' });
    const art = page.locator(`${sel}[data-inserted="live"]`);
    await art.waitFor();
    assert.equal(await page.locator(sel).count(), 1, `${sel} is on the page once`);
    const runText = (await art.locator('.run-position').textContent()).replace(/\s+/g, ' ');
    assert.match(runText, new RegExp(`#${r.journal_index}\\b.*\\b${checkpoint.slice(0, 7)}\\b`), `run position: ${runText}`);
    const got = await art.evaluate((a) => ({
      state: a.dataset.state,
      withheld: a.dataset.withheld,
      type: a.dataset.type,
      journal: a.dataset.journalIndex,
      badge: a.querySelector('.badge').dataset.state,
      badgeText: a.querySelector('.badge').textContent.trim(),
      runJournal: a.querySelector('.run-position').dataset.journalIndex,
      checkpoint: a.querySelector('.run-position').dataset.checkpoint,
      actor: a.querySelector('.actor').textContent,
      spine: a.querySelector('.spine-hash').textContent,
      copy: a.querySelector('button.copy').hidden ? 'hidden' : a.querySelector('button.copy').dataset.copy,
    }));
    assert.deepEqual(got, {
      state: 'verified',
      withheld: 'false',
      type: r.type,
      journal: String(r.journal_index),
      badge: 'verified',
      badgeText: 'verified',
      runJournal: String(r.journal_index),
      checkpoint,
      actor: AGENT,
      spine: r.spine_entry_hash,
      copy: r.spine_entry_hash,
    });
    return art;
  }

  before(async () => {
    ws = workspace(WRITER);
    await ws.cli('task', 'create', TASK, '--title', TITLE, '--gate', 'unit=true');
    token = (await ws.cli('task', 'claim', TASK, '--agent', AGENT)).trim();
    // A checkpoint before the page opens: every post is bound to it.
    commit1 = (await ws.cliJSON('checkpoint', TASK)).data.commit;
    lastCheckpoint = commit1;
    await ws.cli('task', 'create', CLEAN, '--title', 'Nothing to see');
    await ws.cli('task', 'create', KINDS, '--title', 'Every kind of row', '--gate', 'unit=true', '--evidence', 'tests=true');
    kindsToken = (await ws.cli('task', 'claim', KINDS, '--agent', AGENT)).trim();
    await ws.cli('task', 'start', KINDS);
    server = await serve(ws);
    browser = await launch();
    const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: server.url });
    page = await context.newPage();
    await watch(page, () => { navigations += 1; });
    await page.goto(server.url + taskPath(TASK));
    await page.locator('#live-status[data-state="live"]').waitFor();
    await page.evaluate(() => { window.__e2eMarker = 'still-here'; });
  });

  after(async () => {
    await browser?.close();
    await server?.kill('SIGTERM');
    ws?.remove();
    for (const m of consoleMessages) console.log(`console ${m.type}: ${m.text}`);
    console.log(`browser suite: ${((Date.now() - started) / 1000).toFixed(1)} s`);
  });

  it('renders the task on the server: title as text, the strip with the declared gate', async () => {
    assert.equal(await page.locator('body').getAttribute('data-page'), 'task');
    assert.equal(await page.locator('body').getAttribute('data-task'), TASK);
    assert.equal(await page.locator('.task-title').textContent(), TITLE);
    assert.ok((await page.title()).includes(TITLE), `the title shows as text: ${await page.title()}`);
    const strip = page.locator('#progress-strip');
    assert.equal(await strip.getAttribute('data-earned-steps'), '1');
    assert.equal(await strip.locator('[data-field="checkpoints"]').textContent(), '1');
    assert.equal(await strip.locator('[data-field="gates_passed"]').textContent(), '0');
    assert.match(await strip.textContent(), /\(1 declared\)/);
    assert.equal(await strip.locator('[data-field="claim_agent"]').textContent(), AGENT);
    assert.equal(await page.locator('#no-artifacts').isVisible(), true);
  });

  it('shows a report posted by another process, live, highlighted, verified, at its run position', async () => {
    const r = await post(KEY_REPORT, '--type', 'report', '--body', REPORT);
    const art = await assertLive(r, commit1);
    const md = art.locator('.markdown');
    assert.equal(await md.locator('h1').textContent(), 'Findings');
    assert.equal(await md.locator('strong').textContent(), 'bold');
    assert.equal(await md.locator('del').textContent(), 'struck');
    const safe = md.locator('a[href="https://example.com/ok"]');
    assert.equal(await safe.textContent(), 'a safe one');
    assert.match(await safe.getAttribute('rel'), /noopener/);
    assert.match(await safe.getAttribute('rel'), /noreferrer/);
    // The javascript: link is no anchor with that href, and nothing of the
    // raw HTML became an element.
    const anchors = await md.locator('a').evaluateAll((as) => as.map((a) => [a.textContent, a.getAttribute('href')]));
    assert.deepEqual(anchors.filter(([, h]) => h !== null && !/^https?:\/\//.test(h)), [], `anchors of the report: ${JSON.stringify(anchors)}`);
    assert.deepEqual(anchors.filter(([t, h]) => t === 'x' && h !== null), [], 'the javascript: link is an anchor with an href');
    assert.equal(await md.locator('script, img, b, [onerror], [onmouseover]').count(), 0);
    assert.equal(await md.locator('td').first().textContent(), 'c', 'the markdown table cell keeps its text, not its markup');
    assert.equal(await page.locator('#no-artifacts').isVisible(), false);
    // The Copy button of an inserted version copies its spine entry hash.
    // "Copied" shows for 1.5 s only, which a poll of a loaded browser can
    // miss: an observer set before the click records that it showed.
    await art.locator('button.copy').evaluate((b) => {
      window.copiedShown = new Promise((resolve) => {
        setTimeout(() => resolve(false), 15000);
        new MutationObserver((_, o) => {
          if (b.dataset.copied === 'true' && b.textContent === 'Copied') {
            o.disconnect();
            resolve(true);
          }
        }).observe(b, { attributes: true, attributeFilter: ['data-copied'], childList: true, characterData: true, subtree: true });
      });
    });
    await art.locator('button.copy').click();
    assert.equal(await page.evaluate(() => window.copiedShown), true, 'the button never showed Copied');
    assert.equal(await page.evaluate(() => navigator.clipboard.readText()), r.spine_entry_hash);
    await assertNoNavigation();
  });

  it('shows a table with markup in its header and cells as text', async () => {
    const file = ws.file('table.csv', csv([COLUMNS, ...ROWS]));
    const r = await post(KEY_TABLE, '--type', 'table', '--csv', file);
    const art = await assertLive(r, commit1);
    const table = art.locator('table.data-table');
    assert.equal(await table.getAttribute('data-rows'), String(ROWS.length));
    assert.equal(await table.getAttribute('data-columns'), String(COLUMNS.length));
    const header = await table.locator('thead th:not(.rownum)').allTextContents();
    assert.deepEqual(header, COLUMNS);
    const cells = await table.locator('tbody tr').evaluateAll((trs) => trs.map((tr) => [...tr.querySelectorAll('td')].map((td) => td.textContent)));
    assert.deepEqual(cells, ROWS);
    assert.equal(await table.locator('b, i, img, script, a').count(), 0, 'markup in cells became elements');
    // The group of a new key lands last: keys are in the order they were first posted.
    const keys = await page.locator('section.artifact-group').evaluateAll((gs) => gs.map((g) => g.dataset.key));
    assert.deepEqual(keys, [KEY_REPORT, KEY_TABLE]);
    await table.locator('tbody td').first().hover();
    await table.locator('thead th:not(.rownum)').nth(1).hover();
    await assertNoNavigation();
  });

  it('shows a link as an anchor with its kind, never embedded', async () => {
    const r = await post(KEY_LINK, '--type', 'link', '--url', LINK, '--kind', 'dashboard');
    const art = await assertLive(r, commit1);
    const a = art.locator('a.artifact-link');
    assert.equal(await a.count(), 1);
    assert.equal(await a.getAttribute('data-link-kind'), 'dashboard');
    assert.equal(await a.getAttribute('rel'), 'noopener noreferrer');
    assert.equal(await a.getAttribute('target'), '_blank');
    assert.equal(await a.textContent(), LINK);
    const href = await a.evaluate((el) => el.href);
    assert.equal(decodeURIComponent(href), decodeURIComponent(new URL(LINK).href), 'the anchor goes where the URL says');
    assert.equal(await art.locator('iframe, img, object, embed, script').count(), 0);
    const keys = await page.locator('section.artifact-group').evaluateAll((gs) => gs.map((g) => g.dataset.key));
    assert.deepEqual(keys, [KEY_REPORT, KEY_TABLE, KEY_LINK]);
    await assertNoNavigation();
  });

  it('moves the strip on a checkpoint of a new commit and a gate pass; later posts bind to the new checkpoint', async () => {
    const strip = page.locator('#progress-strip');
    const before = await strip.getAttribute('data-vector-hash');
    writeFileSync(join(ws.repo, 'work.txt'), 'second\n');
    await ws.git('commit', '-q', '-am', 'second');
    const cp = await ws.cliJSON('checkpoint', TASK);
    const commit2 = cp.data.commit;
    lastCheckpoint = commit2;
    assert.notEqual(commit2, commit1);
    assert.equal(cp.progress.checkpoints, 2);
    assert.equal(cp.progress.earned_steps, 2, 'a new commit earns a step');
    await highlighted({ id: 'progress-strip', vector: cp.progress.vector_hash, earned: '2' });
    assert.notEqual(cp.progress.vector_hash, before);
    assert.equal(await strip.locator('[data-field="checkpoints"]').textContent(), '2');
    assert.equal(await strip.locator('[data-field="earned_steps"]').textContent(), '2');
    assert.equal(await strip.locator('[data-field="vector_hash"]').textContent(), cp.progress.vector_hash.slice(0, 12));

    const gate = await ws.cliJSON('gate', 'run', TASK, 'unit', '--quiet');
    assert.equal(gate.data.passed, true);
    await page.locator(`#progress-strip[data-vector-hash="${gate.progress.vector_hash}"][data-earned-steps="3"]`).waitFor();
    assert.equal(await strip.locator('[data-field="gates_passed"]').textContent(), '1');
    assert.equal(await strip.locator('[data-field="gate_attempts"]').textContent(), '1');

    // A second version of the report: bound to the new checkpoint; the
    // first moves into the history, without its content.
    const r = await post(KEY_REPORT, '--type', 'report', '--body', 'Second **version**, after the second checkpoint.');
    await assertLive(r, commit2);
    const g = page.locator(group(KEY_REPORT));
    assert.equal(await g.getAttribute('data-latest'), '2');
    assert.equal(await g.locator('.latest article.version').count(), 1);
    assert.equal(await g.locator('.latest article.version').getAttribute('data-version'), '2');
    assert.equal(await g.locator('details.history').isHidden(), false);
    assert.equal(await g.locator('.history-count').textContent(), '1');
    assert.equal(await g.locator('.count').getAttribute('data-count'), '2');
    const old = g.locator(`.history-list ${version(KEY_REPORT, 1)}`);
    assert.equal(await old.count(), 1);
    assert.equal(await old.locator('.content').count(), 0);
    assert.equal(await old.locator('.run-position').getAttribute('data-checkpoint'), commit1);
    await assertNoNavigation();
  });

  it('draws the timeline of a task with every row kind: its marks are the journal\'s rows, as the fold counts them, live', async () => {
    const p = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    try {
      await watch(p);
      await p.goto(server.url + taskPath(KINDS));
      await p.locator('#live-status[data-state="live"]').waitFor();
      assert.equal(await p.locator('#timeline').getAttribute('data-rows'), '0');
      // Every kind of row, from other processes, some earning nothing.
      const change = async (n) => {
        writeFileSync(join(ws.repo, `kinds-${n}.txt`), `change ${n}\n`);
        await ws.git('add', `kinds-${n}.txt`);
        await ws.git('commit', '-q', '-m', `kinds ${n}`);
      };
      await change(1);
      await ws.cli('checkpoint', KINDS); // 0: +1
      await ws.cli('checkpoint', KINDS); // 1: the same commit, nothing
      await change(2);
      await ws.cli('checkpoint', KINDS); // 2: +1
      await ws.cli('diff', 'capture', KINDS, '--base', 'HEAD~1'); // 3: +1
      await ws.cli('diff', 'capture', KINDS, '--base', 'HEAD~1'); // 4: the same change, nothing
      await ws.cli('gate', 'run', KINDS, 'unit', '--quiet'); // 5: +1
      await assert.rejects(ws.cli('gate', 'run', KINDS, 'lint', '--quiet', '--', 'false'), /exit 4/); // 6: ad hoc, failed
      await ws.cli('evidence', 'run', KINDS, '--quiet'); // 7: +1
      await ws.cli('artifact', 'post', KINDS, 'notes', '--type', 'report', '--body', 'kinds', '--agent', AGENT, '--claim-token', kindsToken); // 8
      const earned = ['1', '0', '1', '1', '0', '1', '0', '1', '0'];
      const tl = p.locator('#timeline[data-rows="9"]');
      await tl.waitFor();
      const journal = await (await p.request.get(`${server.url}/api/v1/tasks/${encodeURIComponent(KINDS)}/journal`)).json();
      assert.equal(journal.rows.length, 9);
      const got = await p.evaluate(() => ({
        rows: [...document.querySelectorAll('#timeline li.tl-row')].map((li) => ({ ...li.dataset, text: li.textContent })),
        marks: [...document.querySelectorAll('#timeline a.mark')].map((a) => ({ ...a.dataset, cls: a.getAttribute('class'), title: a.querySelector('title').textContent, href: a.getAttribute('href') })),
        vmarks: [...document.querySelectorAll('#timeline a.vmark')].map((a) => ({ ...a.dataset, href: a.getAttribute('href'), target: !!document.getElementById(a.getAttribute('href').slice(1)) })),
        strip: document.getElementById('progress-strip').dataset.earnedSteps,
        end: document.getElementById('timeline').dataset.earned,
      }));
      assert.equal(got.rows.length, 9);
      journal.rows.forEach((row, i) => {
        const li = got.rows[i];
        assert.equal(li.index, String(row.journal_index), `row ${i}`);
        assert.equal(li.kind, row.kind, `row ${i}`);
        assert.equal(li.proof, row.proof, `row ${i}`);
        assert.equal(li.counts, 'true', `row ${i}`);
        assert.equal(li.earned, earned[i], `row ${i} (${row.kind}) earned: ${li.text}`);
        if (earned[i] === '0' && row.kind !== 'artifact_posted') assert.match(li.text, /earned nothing: \S/, `row ${i} does not say why`);
      });
      // One mark a row of work, saying what it earned; the version on its lane.
      const work = journal.rows.filter((r) => r.kind !== 'artifact_posted');
      assert.deepEqual(got.marks.map((m) => [m.index, m.kind]), work.map((r) => [String(r.journal_index), r.kind]));
      for (const m of got.marks) {
        assert.equal(m.href, `#tl-row-${m.index}`);
        assert.match(m.title, m.earned === '1' ? /earned 1 step/ : /earned nothing: /, m.title);
        assert.match(m.cls, m.earned === '1' ? /mark-earned/ : /mark-nothing/);
      }
      assert.deepEqual(got.vmarks.map((v) => [v.index, v.key, v.version, v.state, v.target]), [['8', 'notes', '1', 'verified', true]]);
      assert.equal(got.end, got.strip, 'the line ends at the strip\'s earned steps');
      assert.equal(got.end, '5');
      // A mark links to its row, which says what it earned.
      await p.locator('#timeline a.mark[data-index="1"]').click();
      assert.equal(await p.locator('#tl-row-1').isVisible(), true, 'the row a mark links to is not shown');
      await assertInert(p);
    } finally {
      await p.close();
    }
  });

  it('compares two versions of a table from the task page: the changed cell, named by its column', async () => {
    const rows2 = [ROWS[0], [ROWS[1][0], ROWS[1][1], 'a changed note']];
    const r = await post(KEY_TABLE, '--type', 'table', '--csv', ws.file('table-2.csv', csv([COLUMNS, ...rows2])));
    await assertLive(r, lastCheckpoint);
    // The live page now offers v1 against v2.
    const form = page.locator(`${group(KEY_TABLE)} form.compare`);
    assert.equal(await form.isVisible(), true);
    assert.deepEqual(await form.locator('select').evaluateAll((ss) => ss.map((s) => s.value)), ['1', '2']);
    const p = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    try {
      await watch(p);
      await p.goto(server.url + taskPath(TASK));
      const f = p.locator(`${group(KEY_TABLE)} form.compare`);
      await f.locator('select[name="from"]').selectOption('1');
      await f.locator('select[name="to"]').selectOption('2');
      await Promise.all([p.waitForURL(/\/diff\//), f.locator('button[type="submit"]').click()]);
      assert.equal(await p.locator('body').getAttribute('data-page'), 'diff');
      const diff = p.locator('#diff[data-from="1"][data-to="2"][data-refused="false"]');
      await diff.waitFor();
      const changed = p.locator('#diff-table td[data-changed="true"]');
      assert.equal(await changed.count(), 1);
      assert.equal(await changed.getAttribute('data-column'), 'note');
      assert.equal(await changed.locator('del').textContent(), ROWS[1][2], 'the former cell, as text');
      assert.equal(await changed.locator('ins').textContent(), 'a changed note');
      assert.equal(await p.locator('#diff-table tr[data-change="changed"]').getAttribute('data-to'), '2');
      assert.equal(await p.locator('#table-summary').getAttribute('data-rows-changed'), '1');
      // The other cells of the changed row are there, unchanged, as text.
      assert.equal(await p.locator('#diff-table tr[data-change="changed"] td:not([data-changed])').count(), 2);
      await p.screenshot({ path: join(dirname(SCREENSHOT), 'diff-table.png'), fullPage: true });
      await assertInert(p);
    } finally {
      await p.close();
    }
    await assertNoNavigation();
  });

  it('keeps every payload inert', async () => {
    await assertInert(page);
    await assertNoNavigation();
  });

  it('resumes a dropped connection: a post made while the server is down appears once it is back', async () => {
    await page.evaluate(() => {
      const el = document.getElementById('live-status');
      window.__liveStates = [el.dataset.state];
      new MutationObserver(() => {
        const s = el.dataset.state;
        if (window.__liveStates[window.__liveStates.length - 1] !== s) window.__liveStates.push(s);
      }).observe(el, { attributes: true, attributeFilter: ['data-state'] });
    });
    const port = server.port;
    const seen = await page.locator('body').getAttribute('data-seen-event-id');
    assert.match(seen ?? '', /^\d+$/, 'body[data-seen-event-id] names the last event received');
    const isStream = (q) => q.url().startsWith(`${server.url}/api/v1/events?`);
    // The browser's own retry must hit the closed port at least once.
    const refused = page.waitForEvent('requestfailed', {
      predicate: (q) => isStream(q) && /CONNECTION_REFUSED/.test(q.failure()?.errorText ?? ''),
    });
    await server.kill('SIGKILL');
    await page.locator('#live-status[data-state="reconnecting"]').waitFor();
    const r = await post(KEY_REPORT, '--type', 'report', '--body', 'Posted while the server was down.');
    await refused.catch((err) => { throw new Error(`the browser never retried the stream while the server was down: ${err}`); });
    assert.equal(await page.locator('#live-status').getAttribute('data-state'), 'reconnecting');
    const resumed = page.waitForResponse((q) => isStream(q.request()) && q.status() === 200);
    server = await serve(ws, { addr: `127.0.0.1:${port}` });
    const headers = await (await resumed).request().allHeaders();
    assert.equal(headers['last-event-id'], seen, 'the browser resumes from the last event it saw');
    await assertLive(r, lastCheckpoint);
    await page.locator('#live-status[data-state="live"]').waitFor();
    const states = await page.evaluate(() => window.__liveStates);
    assert.deepEqual(states.slice(0, 2), ['live', 'reconnecting'], `#live-status went ${states.join(' → ')}`);
    assert.equal(states[states.length - 1], 'live', `#live-status went ${states.join(' → ')}`);
    assert.ok(!states.includes('offline'), `the browser gave up the stream: #live-status went ${states.join(' → ')}`);
    // Nothing twice: every version on the page once.
    const ids = await page.locator('article.version').evaluateAll((as) => as.map((a) => `${a.dataset.key}@${a.dataset.version}`));
    assert.deepEqual(ids, [...new Set(ids)], 'a version shown twice');
    assert.equal(await page.locator(group(KEY_REPORT)).locator('.history-count').textContent(), '2');
    await assertNoNavigation();
  });

  it('shows, live, what a fresh render shows', async () => {
    const fresh = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    await watch(fresh);
    await fresh.goto(server.url + taskPath(TASK));
    const snapshot = (p) => p.evaluate(() => ({
      strip: { ...document.getElementById('progress-strip').dataset },
      integrity: { ...document.getElementById('integrity').dataset },
      timeline: {
        ...document.getElementById('timeline').dataset,
        rows: [...document.querySelectorAll('#timeline li.tl-row')].map((li) => ({ ...li.dataset })),
        marks: document.querySelectorAll('#timeline a.mark').length,
        versions: [...document.querySelectorAll('#timeline a.vmark')].map((a) => a.getAttribute('href')),
      },
      groups: [...document.querySelectorAll('section.artifact-group')].map((g) => ({
        key: g.dataset.key,
        type: g.dataset.type,
        latest: g.dataset.latest,
        count: g.querySelector('.count').dataset.count,
        history: g.querySelector('.history-count').textContent,
        versions: [...g.querySelectorAll('article.version')].map((a) => ({
          version: a.dataset.version,
          state: a.dataset.state,
          journal: a.dataset.journalIndex,
          checkpoint: a.querySelector('.run-position').dataset.checkpoint,
          content: a.querySelector('.content')?.textContent ?? null,
        })),
      })),
    }));
    const live = await snapshot(page);
    const rendered = await snapshot(fresh);
    assert.deepEqual(live, rendered);
    await assertInert(fresh);
    await fresh.close();
  });

  it('saves a screenshot of the task page', async (t) => {
    mkdirSync(dirname(SCREENSHOT), { recursive: true });
    await page.locator(`${group(KEY_REPORT)} details.history summary`).click();
    await page.screenshot({ path: SCREENSHOT, fullPage: true });
    t.diagnostic(`screenshot: ${SCREENSHOT}`);
    console.log(`screenshot: ${SCREENSHOT}`);
    await assertNoNavigation();
  });

  it('refuses a key with markup, so none can reach a page (a key is [A-Za-z0-9][A-Za-z0-9_.-]{0,127})', async () => {
    const groups = await page.locator('section.artifact-group').count();
    for (const key of ['<img src=x onerror="window.__xss=13">', '"><script>window.__xss=14</script>', 'a b', 'k&amp;']) {
      await assert.rejects(post(key, '--type', 'report', '--body', 'never posted'), /key/, `the key ${key} was accepted`);
    }
    assert.equal(await page.locator('section.artifact-group').count(), groups, 'a group appeared');
    await assertInert(page);
    await assertNoNavigation();
  });

  // rgb reads a computed colour; luminance is its relative luminance (WCAG).
  const rgb = (c) => (c.match(/[\d.]+/g) || []).slice(0, 3).map(Number);
  const luminance = (c) => {
    const [r, g, b] = rgb(c).map((v) => { const s = v / 255; return s <= 0.03928 ? s / 12.92 : ((s + 0.055) / 1.055) ** 2.4; });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  };
  const contrast = (a, b) => { const [x, y] = [luminance(a), luminance(b)].sort((m, n) => n - m); return (x + 0.05) / (y + 0.05); };

  it('fits a phone-width screen: the page never scrolls sideways, a wide table scrolls in its box, the panel works by touch', async () => {
    const cols = Array.from({ length: 8 }, (_, i) => `column-${i}-with-a-long-name`);
    const wide = await post('wide.table', '--type', 'table', '--csv',
      ws.file('wide.csv', csv([cols, cols.map((_, i) => `a cell of column ${i} that is long`)])));
    await assertLive(wide, lastCheckpoint);
    const ctx = await browser.newContext({ viewport: { width: 375, height: 667 }, isMobile: true, hasTouch: true, deviceScaleFactor: 2 });
    const p = await ctx.newPage();
    try {
      await watch(p);
      await p.goto(server.url + taskPath(TASK));
      await p.locator('#live-status[data-state="live"]').waitFor();
      const m = await p.evaluate(() => {
        const vw = document.documentElement.clientWidth;
        // What may be wider than the screen scrolls inside its own box.
        const inBox = (el) => el.closest('.table-wrap, .timeline-wrap, .markdown pre, .markdown table');
        const over = [...document.querySelectorAll('body *')].filter((el) => {
          const r = el.getBoundingClientRect();
          return !inBox(el) && r.width > 0 && (r.right > vw + 1 || r.left < -1);
        }).map((el) => `${el.tagName.toLowerCase()}.${el.className} right ${Math.round(el.getBoundingClientRect().right)}`);
        const box = document.querySelector('section.artifact-group[data-key="wide.table"] .table-wrap');
        return {
          vw, page: document.documentElement.scrollWidth, body: document.body.scrollWidth, over,
          box: box && { right: box.getBoundingClientRect().right, scrollWidth: box.scrollWidth, clientWidth: box.clientWidth },
        };
      });
      assert.ok(m.vw <= 375, `the layout viewport is ${m.vw} px wide`);
      assert.ok(m.page <= m.vw && m.body <= m.vw, `the page scrolls sideways: ${m.page} / ${m.body} px wide in ${m.vw}`);
      assert.deepEqual(m.over, [], 'elements beyond the screen\'s edges');
      assert.ok(m.box && m.box.right <= m.vw + 1, `the wide table's box: ${JSON.stringify(m.box)}`);
      assert.ok(m.box.scrollWidth > m.box.clientWidth, 'the wide table does not scroll in its box');
      await p.evaluate(() => window.scrollTo(400, 0));
      assert.equal(await p.evaluate(() => window.scrollX), 0, 'the page scrolled sideways');
      // The table scrolls sideways in its box, by touch as by script.
      const box = p.locator('section.artifact-group[data-key="wide.table"] .table-wrap');
      await box.evaluate((b) => { b.scrollLeft = 200; });
      assert.ok(await box.evaluate((b) => b.scrollLeft) > 0, 'the table box does not scroll');
      // The history opens by a tap; the strip, the badge, the hash and its
      // Copy button are on the screen.
      const hist = p.locator(`${group(KEY_REPORT)} details.history`);
      await hist.locator('summary').tap();
      assert.equal(await hist.evaluate((d) => d.open), true, 'a tap did not open the history');
      await hist.locator('.history-list').waitFor();
      for (const sel of ['#progress-strip', `${group(KEY_REPORT)} .latest .badge`, `${group(KEY_REPORT)} .latest .spine-hash`, `${group(KEY_REPORT)} .latest button.copy`, `${group(KEY_LINK)} a.artifact-link`]) {
        const el = p.locator(sel).first();
        await el.scrollIntoViewIfNeeded();
        const bb = await el.boundingBox();
        assert.ok(bb && bb.x >= 0 && bb.x + bb.width <= m.vw + 1 && bb.width > 0, `${sel} is not within the screen: ${JSON.stringify(bb)}`);
      }
      await p.locator(`${group(KEY_REPORT)} .latest button.copy`).first().tap();
      await p.screenshot({ path: SCREENSHOT.replace(/\.png$/, '-phone.png'), fullPage: true });
      await assertInert(p);
    } finally {
      await ctx.close();
    }
    await assertNoNavigation();
  });

  it("follows the system's light or dark preference", async (t) => {
    const colours = async (scheme) => {
      const ctx = await browser.newContext({ viewport: { width: 1280, height: 900 }, colorScheme: scheme });
      const p = await ctx.newPage();
      try {
        await watch(p);
        await p.goto(server.url + taskPath(TASK));
        await p.locator('#live-status[data-state="live"]').waitFor();
        const c = await p.evaluate(() => {
          const st = (sel, prop) => getComputedStyle(document.querySelector(sel))[prop];
          return {
            dark: matchMedia('(prefers-color-scheme: dark)').matches,
            bg: st('body', 'backgroundColor'), fg: st('body', 'color'),
            badgeBg: st('.badge[data-state="verified"]', 'backgroundColor'), badgeFg: st('.badge[data-state="verified"]', 'color'),
            // The timeline: its line and an earned mark on the page.
            line: st('#timeline .earned-line', 'stroke'), mark: st('#timeline .mark-earned circle', 'fill'),
            axis: st('#timeline text.tick', 'fill'),
          };
        });
        if (scheme === 'dark') await p.screenshot({ path: SCREENSHOT.replace(/\.png$/, '-dark.png'), fullPage: true });
        await assertInert(p);
        return c;
      } finally {
        await ctx.close();
      }
    };
    const light = await colours('light');
    const dark = await colours('dark');
    t.diagnostic(`light ${JSON.stringify(light)}; dark ${JSON.stringify(dark)}`);
    assert.equal(light.dark, false);
    assert.equal(dark.dark, true);
    assert.notEqual(light.bg, dark.bg, 'the background does not follow the preference');
    assert.ok(luminance(light.bg) > 0.8, `light background ${light.bg}`);
    assert.ok(luminance(dark.bg) < 0.05, `dark background ${dark.bg}`);
    for (const [name, c] of [['light', light], ['dark', dark]]) {
      assert.ok(contrast(c.fg, c.bg) >= 7, `${name}: text ${c.fg} on ${c.bg}, contrast ${contrast(c.fg, c.bg).toFixed(1)}`);
      assert.ok(contrast(c.badgeFg, c.badgeBg) >= 4.5, `${name}: badge ${c.badgeFg} on ${c.badgeBg}, contrast ${contrast(c.badgeFg, c.badgeBg).toFixed(1)}`);
      // Graphics need 3:1 (WCAG 1.4.11), the axis labels 4.5:1.
      for (const [what, col, min] of [['timeline line', c.line, 3], ['earned mark', c.mark, 3], ['axis label', c.axis, 4.5]]) {
        assert.ok(contrast(col, c.bg) >= min, `${name}: ${what} ${col} on ${c.bg}, contrast ${contrast(col, c.bg).toFixed(1)}`);
      }
    }
    await assertNoNavigation();
  });

  it('saves a screenshot of each view at 1280 and 375 wide; none scrolls sideways at 375', async (t) => {
    const views = {
      index: '/',
      task: taskPath(TASK),
      kinds: taskPath(KINDS),
      version: `${taskPath(TASK)}/versions/${encodeURIComponent(KEY_REPORT)}/1`,
      diff: `${taskPath(TASK)}/diff/${encodeURIComponent(KEY_TABLE)}?from=1&to=2`,
      'diff-report': `${taskPath(TASK)}/diff/${encodeURIComponent(KEY_REPORT)}?from=1`,
    };
    mkdirSync(dirname(SCREENSHOT), { recursive: true });
    for (const width of [1280, 375]) {
      const phone = width < 500;
      const ctx = await browser.newContext({ viewport: { width, height: phone ? 667 : 900 }, isMobile: phone, hasTouch: phone });
      try {
        for (const [name, path] of Object.entries(views)) {
          const p = await ctx.newPage();
          await watch(p);
          await p.goto(server.url + path);
          await p.locator('main').waitFor();
          const m = await p.evaluate(() => ({ vw: document.documentElement.clientWidth, page: document.documentElement.scrollWidth, kind: document.body.dataset.page }));
          assert.ok(m.page <= m.vw, `${name} at ${width}: the page scrolls sideways (${m.page} in ${m.vw})`);
          assert.notEqual(m.kind, 'problem', `${name}: ${path} is a problem page`);
          const file = join(dirname(SCREENSHOT), `${name}-${width}.png`);
          await p.screenshot({ path: file, fullPage: true });
          t.diagnostic(`screenshot: ${file}`);
          await assertInert(p);
          await p.close();
        }
      } finally {
        await ctx.close();
      }
    }
  });

  let secret;
  it('shows the content of the version a copy will tamper with, while it is intact', async () => {
    secret = await post(KEY_SECRET, '--type', 'report', '--body', `${SECRET} must never reach a page once tampered.`);
    const art = await assertLive(secret, lastCheckpoint);
    assert.match(await art.locator('.markdown').textContent(), new RegExp(SECRET));
    await assertInert(page);
    await assertNoNavigation();
  });

  it('flags a tampered task on the task list, first and in red, and counts a live post on its page; a tampered earlier version stays in sight', async (t) => {
    assert.ok(secret, 'the version was posted');
    const copy = await tamperedCopy(ws, secret.blob, 'packed', SECRET, 'live');
    const tampered = await serve(ws, { repo: copy });
    const ctx = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    const p = await ctx.newPage();
    try {
      await watch(p);
      await p.goto(tampered.url + '/');
      const rows = await p.locator('#tasks tr.task').evaluateAll((trs) => trs.map((tr) => [tr.dataset.task, tr.dataset.integrity]));
      assert.deepEqual(rows[0], [TASK, 'tampered'], `rows: ${JSON.stringify(rows)}`);
      assert.ok(rows.slice(1).every(([, st]) => st === 'verified'), `rows: ${JSON.stringify(rows)}`);
      assert.ok(rows.findIndex(([id]) => id === CLEAN) > 0, 'A-clean sorts before the tampered task by id, and is listed after it');
      const red = await p.locator(`#tasks tr.task[data-task=${JSON.stringify(TASK)}]`).evaluate((tr) => {
        const c = (el, prop) => (getComputedStyle(el)[prop].match(/[\d.]+/g) || []).slice(0, 3).map(Number);
        const badge = tr.querySelector('.integrity .badge');
        return { bg: c(tr.querySelector('td'), 'backgroundColor'), badge: c(badge, 'color'), text: badge.textContent, why: tr.querySelector('.integrity .why').textContent };
      });
      assert.equal(red.text, 'tampered');
      assert.ok(red.bg[0] > red.bg[1] + 10 && red.bg[0] > red.bg[2] + 10, `the tampered row is not red: ${red.bg}`);
      assert.ok(red.badge[0] > red.badge[1] + 50, `the tampered badge is not red: ${red.badge}`);
      assert.match(red.why, /1 of \d+ versions tampered/);
      assert.equal(await p.locator('#tasks-summary').getAttribute('data-tampered'), '1');
      await p.screenshot({ path: join(dirname(SCREENSHOT), 'index-tampered-1280.png'), fullPage: true });

      await p.goto(tampered.url + taskPath(TASK));
      await p.locator('#live-status[data-state="live"]').waitFor();
      const integrity = p.locator('#integrity');
      const total = Number(await integrity.getAttribute('data-total'));
      assert.equal(await integrity.getAttribute('data-state'), 'tampered');
      assert.equal(await integrity.getAttribute('data-tampered'), '1');
      assert.match(await integrity.locator('#integrity-reason').textContent(), new RegExp(`1 of ${total} versions tampered`));
      // Another process posts the key's next version into the tampered copy:
      // the counts follow without a reload, and the tampered v1 moves to
      // the flagged list, in sight, saying once what failed.
      await ws.cli('--repo', copy, 'artifact', 'post', TASK, KEY_SECRET, '--type', 'report', '--body', 'after the tampering',
        '--agent', AGENT, '--claim-token', token);
      await p.locator(`#integrity[data-total="${total + 1}"][data-tampered="1"][data-verified="${total}"]`).waitFor();
      assert.match(await p.locator('#integrity-reason').textContent(), new RegExp(`1 of ${total + 1} versions tampered`));
      await p.locator(`${version(KEY_SECRET, 2)}[data-inserted="live"]`).waitFor();
      const v1 = p.locator(`${group(KEY_SECRET)} .flagged-list ${version(KEY_SECRET, 1)}[data-state="tampered"]`);
      assert.equal(await v1.count(), 1, 'the tampered v1 is not in the flagged list');
      assert.equal(await v1.isVisible(), true, 'the tampered v1 is out of sight');
      const card = await v1.evaluate((a) => ({ text: a.textContent, reason: a.querySelector('.withheld-reason').textContent, stateReason: a.querySelectorAll('.state-reason').length }));
      assert.equal(card.stateReason, 0);
      assert.equal(card.text.split(card.reason).length - 1, 1, `the card says what failed ${card.text.split(card.reason).length - 1} times`);
      // The timeline marks the tampered version on its lane.
      assert.equal(await p.locator(`#timeline a.vmark[data-key=${JSON.stringify(KEY_SECRET)}][data-version="1"]`).getAttribute('data-state'), 'tampered');
      assert.ok(!(await p.content()).includes(SECRET_TAIL), 'the tampered content reached the DOM');
      await p.screenshot({ path: join(dirname(SCREENSHOT), 'task-tampered-1280.png'), fullPage: true });
      await assertInert(p);
    } finally {
      await ctx.close();
      await tampered.kill('SIGTERM');
    }
  });

  for (const mode of ['packed', 'loose']) {
    it(`renders a tampered version (a ${mode} blob, in a copy) as withheld with its reason and no content`, async (t) => {
      assert.ok(secret, 'the version was posted');
      const copy = await tamperedCopy(ws, secret.blob, mode, SECRET);
      const tampered = await serve(ws, { repo: copy });
      const p = await browser.newPage({ viewport: { width: 1280, height: 900 } });
      try {
        await watch(p);
        await p.goto(tampered.url + taskPath(TASK));
        const v = p.locator(`${version(KEY_SECRET, 1)}[data-state="tampered"][data-withheld="true"]`);
        await v.waitFor();
        assert.equal(await v.locator('.badge').getAttribute('data-state'), 'tampered');
        assert.equal(await v.locator('.badge').textContent(), 'tampered');
        assert.match(await v.locator('.withheld').textContent(), /^content withheld: \S/, 'it says content withheld and why');
        const reason = (await v.locator('.withheld-reason').textContent()).trim();
        t.diagnostic(`withheld: ${reason}`);
        assert.ok(reason.includes(`${KEY_SECRET} v1`) && reason.includes(`journal index ${secret.journal_index}`),
          `the reason names the key, version and journal index: ${reason}`);
        assert.equal(await v.locator('.content').count(), 0);
        assert.match(await v.locator('.writer').textContent(), /unproven/);
        assert.equal(await p.locator('#artifacts').getAttribute('data-verified'), 'false');
        // Neither the content nor what is left of it (a loose copy has one
        // byte flipped) reaches the DOM.
        assert.ok(!(await p.content()).includes(SECRET_TAIL), 'the tampered content reached the DOM');
        // The other versions of the copy still verify and show.
        assert.equal(await p.locator(`${version(KEY_REPORT, 3)}[data-state="verified"] .content`).count(), 1);
        // Nor does any response the page's script could fetch carry it.
        for (const path of [`/fragments/versions/${encodeURIComponent(KEY_SECRET)}/1`, `/fragments/artifacts/${encodeURIComponent(KEY_SECRET)}`]) {
          const res = await p.request.get(tampered.url + taskPath(TASK) + path);
          assert.equal(res.status(), 200, path);
          const html = await res.text();
          assert.match(html, /data-withheld="true"/, path);
          assert.ok(!html.includes(SECRET_TAIL), `the tampered content is in ${path}`);
        }
        // The version's own page withholds it too.
        await p.goto(tampered.url + `${taskPath(TASK)}/versions/${encodeURIComponent(KEY_SECRET)}/1`);
        await p.locator(`${version(KEY_SECRET, 1)}[data-withheld="true"] .withheld`).waitFor();
        assert.ok(!(await p.content()).includes(SECRET_TAIL), 'the tampered content reached the version page');
        await assertInert(p);
      } finally {
        await p.close();
        await tampered.kill('SIGTERM');
      }
      await assertNoNavigation();
    });
  }
});
