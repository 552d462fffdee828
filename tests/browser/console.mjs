// Drives omnisym's /console in Debian's headless Chromium and checks what a person would
// see. tests/integration/console_browser.rs starts the server and runs this; it can also
// be run by hand against any server:
//
//   node tests/browser/console.mjs --base http://127.0.0.1:3021 --scenario crash \
//     --fixture fixtures/minidump/fp/crash.dmp --out /tmp/shots --expect '{...}'
//
// Scenarios (--scenario, repeatable, run in order in one page):
//   crash    upload --fixture through the file input; the crashing thread comes first with
//            the expected functions in order, inlined frames under their caller, and the
//            source context line (expect: {thread_id, frames: [{function, lineno,
//            context_line, inlined}]}).
//   missing  paste a stack (expect.paste) with a module no source has; its frames and the
//            module's "Why not?" panel explain it, and every location tried is "not
//            found", with download records matching /console/api/downloads.
//   status   open the status view, note the recent-requests count, make a request, and
//            see the count and the table change (expect: {max_concurrent, source}: with
//            a source, run after `crash`, whose downloads it must list).
// With CONSOLE_TOKEN set (the server's fronts.token), the browser signs in with HTTP
// Basic credentials and the script's own requests send it as a Bearer token.
// Exits non-zero on the first failure, with a full-page screenshot in --out; on success
// each scenario leaves its own screenshot there (crash.png, candidates.png, status.png).

import { chromium } from 'playwright-core';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';

const { values: args } = parseArgs({
  options: {
    base: { type: 'string', default: process.env.CONSOLE_BASE_URL },
    fixture: { type: 'string', default: process.env.CONSOLE_FIXTURE },
    out: { type: 'string', default: process.env.CONSOLE_OUT || 'browser-test-output' },
    scenario: { type: 'string', multiple: true },
    expect: { type: 'string', default: '{}' },
    chromium: { type: 'string', default: process.env.CHROMIUM || '/usr/bin/chromium' },
  },
});
assert.ok(args.base, '--base (the server URL) is required');
assert.ok(args.scenario && args.scenario.length, '--scenario is required');
const expected = JSON.parse(args.expect);
const base = args.base.replace(/\/$/, '');
const WAIT = { timeout: 90_000 };
fs.mkdirSync(args.out, { recursive: true });

const log = (...what) => console.log('[console.mjs]', ...what);

// ---------------------------------------------------------------- scenarios

async function crash(page) {
  assert.ok(args.fixture, '--fixture is required for the crash scenario');
  await openConsole(page);
  await page.setInputFiles('#crash-file', args.fixture);
  await symbolicated(page);

  const thread = page.locator('#threads details.thread').first();
  assert.equal(await thread.getAttribute('open'), '', 'the first thread is open');
  const summary = await thread.locator(':scope > summary').innerText();
  log('first thread:', summary);
  assert.match(summary, /\(crashed\)/, 'the crashing thread comes first');
  if (expected.thread_id !== undefined) {
    assert.equal(await thread.getAttribute('data-thread'), String(expected.thread_id), 'thread id');
  }

  // Frames as shown, in order, each with whether it sits in an "inlined" list.
  const shown = await thread.locator('.frame-line').evaluateAll((lines) => lines.map((line) => ({
    function: line.querySelector('.function').textContent,
    file: line.querySelector('.file') ? line.querySelector('.file').textContent : null,
    inlined: Boolean(line.closest('.inlined')),
    reason: line.parentElement.querySelector(':scope > .reason')?.textContent ?? null,
  })));
  log('frames shown:', shown.slice(0, 8).map((f) => `${f.inlined ? '  (inlined) ' : ''}${f.function} ${f.file ?? ''}`).join(' | '));
  // Inlined frames are listed under their real frame, so the page shows each group's real
  // frame before the frames inlined into it.
  const order = regroup(expected.frames);
  assert.ok(shown.length >= order.length, `at least ${order.length} frames`);
  order.forEach((want, i) => {
    assert.equal(shown[i].function, want.function, `frame ${i}`);
    assert.equal(shown[i].inlined, Boolean(want.inlined), `frame ${i} (${want.function}) inlined`);
    if (want.lineno) assert.match(shown[i].file, new RegExp(`:${want.lineno}$`), `frame ${i} line`);
    assert.equal(shown[i].reason, null, `frame ${i} needs no explanation`);
  });

  // Source context, where the fixture's sources are on a source.
  if (order[0].context_line) {
    const source = thread.locator('details.source').first();
    await source.locator('summary').click();
    const current = await source.locator('.line.current').innerText();
    assert.ok(current.includes(order[0].context_line.trim()), `context line: ${current}`);
  }

  const rows = page.locator('#modules tbody tr');
  const atLeast = expected.min_modules ?? 1;
  assert.ok(await rows.count() >= atLeast, `the module table lists at least ${atLeast} modules`);
  const found = page.locator('#modules tbody tr[data-debug-status="found"]');
  assert.equal(await found.count(), 1, 'exactly the crashing program is found');
  await shot(page, 'crash.png');
}

async function missing(page) {
  const paste = expected.paste;
  assert.ok(paste, 'expect.paste is required for the missing scenario');
  await symbolicatePasted(page, paste.text);

  const frames = page.locator('#threads .frame');
  const reasons = await frames.evaluateAll((items) => items.map((li) => ({
    function: li.querySelector('.function').textContent,
    reason: li.querySelector(':scope > .reason')?.textContent ?? null,
  })));
  log('pasted frames:', JSON.stringify(reasons));
  assert.equal(reasons.length, paste.frames.length, 'one frame group per pasted address');
  paste.frames.forEach((want, i) => {
    if (want.function) assert.equal(reasons[i].function, want.function, `frame ${i}`);
    if (want.reason) assert.match(reasons[i].reason ?? '', new RegExp(want.reason), `frame ${i} reason`);
  });

  const row = page.locator('#modules tbody tr').filter({ hasText: paste.missing_module });
  assert.equal(await row.getAttribute('data-debug-status'), 'missing');
  await row.locator('button').focus();
  await page.keyboard.press('Enter');
  await page.locator('#why').waitFor({ state: 'visible' });
  assert.equal(await page.evaluate(() => document.activeElement.id), 'why-heading', 'focus moves to the panel');
  const reason = await page.locator('#why-reason').innerText();
  log('why:', reason);
  const tried = reason.match(/^Module not found on any source \((\d+) locations? tried\)\.$/);
  assert.ok(tried, `reason sentence: ${reason}`);
  const candidates = await page.locator('#candidates tbody tr').evaluateAll((trs) => trs.map((tr) => ({
    source: tr.cells[0].textContent,
    location: tr.cells[1].textContent,
    outcome: tr.dataset.outcome,
    download: tr.cells[4].textContent,
  })));
  log('candidates:', candidates.length, JSON.stringify(candidates[0]));
  assert.equal(candidates.length, Number(tried[1]), 'the sentence counts the rows');
  assert.ok(candidates.length > 0, 'locations were tried');
  const { downloads } = await api(page, '/console/api/downloads');
  for (const c of candidates) {
    assert.equal(c.outcome, 'not found', `${c.location}`);
    assert.equal(c.source, paste.source, `${c.location}`);
    const record = downloads.find((d) => d.source === c.source && d.location === c.location);
    if (record) assert.ok(c.download.startsWith(record.outcome.replace(/_/g, ' ')), `${c.download} vs ${JSON.stringify(record)}`);
    else assert.equal(c.download, 'answered from the cache');
  }
  await page.locator('#why').scrollIntoViewIfNeeded();
  await shot(page, 'candidates.png');
}

async function denied(page) {
  const want = expected.denied;
  assert.ok(want, 'expect.denied is required for the denied scenario');
  await symbolicatePasted(page, want.text);
  const row = page.locator('#modules tbody tr').filter({ hasText: want.module });
  await row.locator('button').click();
  await page.locator('#why').waitFor({ state: 'visible' });
  const reason = await page.locator('#why-reason').innerText();
  log('why:', reason);
  assert.match(reason, /deny-listed/, 'the module names the deny list');
  const outcomes = await page.locator('#candidates tbody tr').evaluateAll((trs) => trs.map((tr) => tr.dataset.outcome));
  log('outcomes:', JSON.stringify(outcomes));
  assert.ok(outcomes.length > 1, 'several locations were tried');
  assert.ok(outcomes.some((o) => o.startsWith('deny-listed until ')), 'a location is deny-listed');
  const { deny_list: denyList } = await api(page, '/console/api/status');
  assert.ok(denyList.some((d) => d.host === want.host), `${want.host} in ${JSON.stringify(denyList)}`);
  await page.locator('#why').scrollIntoViewIfNeeded();
  await shot(page, 'denied.png');
}

async function status(page) {
  await openConsole(page);
  await page.click('#show-status');
  await page.locator('#status-body').waitFor({ state: 'visible', ...WAIT });
  const inFlight = await page.locator('dd[data-fact="In flight"]').innerText();
  log('in flight:', inFlight);
  if (expected.max_concurrent !== undefined) assert.match(inFlight, new RegExp(`^\\d+ of ${expected.max_concurrent}$`));
  if (expected.source) {
    // An earlier scenario's crash fetched from this source: its tally is listed.
    const row = page.locator('#sources tbody tr').filter({ has: page.locator('th', { hasText: expected.source }) });
    const cells = await row.locator('td').allInnerTexts();
    log('source', expected.source, cells.join(' | '));
    assert.ok(Number(cells[1]) > 0, 'the source counts its downloads');
    assert.equal(Number(cells[1]), Number(cells[2]) + Number(cells[3]) + Number(cells[4]), 'found + not found + failed = downloads');
  }
  const before = Number(await page.locator('#recent-count').innerText());
  log('recent requests before:', before);

  // The request comes from outside the page, as any client's would.
  const resp = await fetch(base + '/symbolicate', {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...authHeader() },
    body: JSON.stringify({ sources: [], modules: [], stacktraces: [{ frames: [{ instruction_addr: '0x1000' }] }] }),
  });
  assert.equal(resp.status, 200, 'the extra request succeeds');
  const requestId = resp.headers.get('x-request-id');

  // Refreshed every 2 s: no reload, the count must change by itself.
  await page.waitForFunction((n) => Number(document.getElementById('recent-count').textContent) > n, before, { timeout: 15_000 });
  const after = Number(await page.locator('#recent-count').innerText());
  log('recent requests after:', after);
  const newest = await page.locator('#recent tbody tr').first().innerText();
  log('newest:', newest);
  assert.match(newest, /POST \/symbolicate/);
  if (requestId) assert.ok(newest.includes(requestId), `the newest row names ${requestId}`);

  const charts = await page.locator('svg.chart').evaluateAll((svgs) => svgs.map((s) => ({
    key: s.dataset.chart, label: s.getAttribute('aria-label'), title: s.querySelector('title').textContent,
  })));
  log('charts:', charts.map((c) => c.label).join(' | '));
  assert.equal(charts.length, 6, 'six charts');
  for (const c of charts) assert.match(c.label, /latest .+, highest/, c.key);
  // The request just made is counted in some interval of the series.
  await page.waitForFunction(() => {
    const label = document.querySelector('svg[data-chart="requests"]').getAttribute('aria-label');
    return /highest [1-9]/.test(label);
  }, null, { timeout: 15_000 });
  await shot(page, 'status.png');
}

const SCENARIOS = { crash, missing, denied, status };

// ---------------------------------------------------------------- helpers

/** Expected frames innermost first → as the page lists them (real frame, then inlined). */
function regroup(frames) {
  const out = [];
  let pending = [];
  for (const f of frames) {
    if (f.inlined) pending.push(f);
    else {
      out.push(f, ...pending);
      pending = [];
    }
  }
  return out.concat(pending);
}

function authHeader() {
  return process.env.CONSOLE_TOKEN ? { authorization: 'Bearer ' + process.env.CONSOLE_TOKEN } : {};
}

async function api(page, apiPath) {
  const resp = await page.request.get(base + apiPath, { headers: authHeader() });
  assert.equal(resp.status(), 200, `${apiPath}: ${await resp.text()}`);
  return resp.json();
}

async function openConsole(page) {
  if (!page.url().startsWith(base + '/console')) {
    if (process.env.CONSOLE_TOKEN) {
      const bare = await fetch(base + '/console/api/status');
      assert.equal(bare.status, 401, 'without the token the console is closed');
      assert.match(bare.headers.get('www-authenticate') || '', /^Basic /, 'and asks for Basic credentials');
    }
    const resp = await page.goto(base + '/console');
    assert.equal(resp.status(), 200, 'GET /console');
    // The stylesheet loaded and parsed as a whole: its first rule defines the colours.
    const accent = await page.evaluate(() => getComputedStyle(document.documentElement).getPropertyValue('--accent'));
    assert.notEqual(accent.trim(), '', 'console.css applies');
  }
  await page.click('#show-crash');
}

/** Opens the console, pastes `text` and waits for its answer. */
async function symbolicatePasted(page, text) {
  await openConsole(page);
  await page.fill('#crash-text', text);
  await page.click('#crash-form button[type="submit"]');
  await symbolicated(page);
}

async function symbolicated(page) {
  await page.waitForFunction(() => {
    const s = document.getElementById('crash-status');
    return s.classList.contains('error') || /^Symbolicated /.test(s.textContent);
  }, null, WAIT);
  const said = await page.locator('#crash-status').innerText();
  log('status:', said);
  assert.match(said, /^Symbolicated /);
  assert.ok(await page.locator('#crash-result').isVisible(), 'the result is shown');
}

async function shot(page, name) {
  const file = path.join(args.out, name);
  await page.screenshot({ path: file, fullPage: true });
  log('screenshot', file);
}

// ---------------------------------------------------------------- main

const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'omnisym-console-'));
const context = await chromium.launchPersistentContext(profile, {
  executablePath: args.chromium,
  headless: true,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  viewport: { width: 1280, height: 900 },
  // With a token, the browser answers the console's Basic challenge as a person would
  // at its prompt: any user name, the token as the password.
  httpCredentials: process.env.CONSOLE_TOKEN ? { username: 'someone', password: process.env.CONSOLE_TOKEN } : undefined,
});
const page = context.pages()[0] || await context.newPage();
// A CSP violation or a script error is a failure even when the page looks right.
const problems = [];
page.on('pageerror', (err) => problems.push('page error: ' + err.message));
page.on('console', (msg) => {
  if (msg.type() === 'error') problems.push('console error: ' + msg.text());
});
page.on('response', (resp) => {
  if (resp.status() >= 400) problems.push(`HTTP ${resp.status()} for ${resp.request().method()} ${resp.url()}`);
});

let current = null;
let failed = false;
try {
  for (current of args.scenario) {
    const scenario = SCENARIOS[current];
    assert.ok(scenario, `unknown scenario ${current}`);
    log('scenario', current);
    await scenario(page);
    assert.deepEqual(problems, [], 'no script errors or CSP violations');
  }
  log('ok:', args.scenario.join(', '));
} catch (err) {
  failed = true;
  console.error(`[console.mjs] FAILED in scenario ${current}:`, err && err.stack ? err.stack : err);
  if (problems.length) console.error('[console.mjs] page problems:', problems);
  await shot(page, `failure-${current}.png`).catch((e) => console.error('no screenshot:', e.message));
} finally {
  await context.close();
  fs.rmSync(profile, { recursive: true, force: true });
}
process.exit(failed ? 1 : 0);
