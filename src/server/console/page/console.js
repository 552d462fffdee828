// The omnisym console: sends a crash through the server's own endpoints, explains each
// frame that did not symbolicate, and watches /console/api/status. Everything that comes
// from a crash or from the server (ids, paths, function names) is untrusted: it reaches
// the page only through textContent and attributes, never as markup.

const OPTIONS = { dif_candidates: true };
const STATUS_EVERY_MS = 2000;
const NATIVE_TYPES = new Set(['elf', 'macho', 'pe', 'pe_dotnet', 'wasm']);
const SVG = 'http://www.w3.org/2000/svg';

const $ = (id) => document.getElementById(id);

/** An element with attributes and children; strings become text nodes. */
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === 'class') node.className = value;
    else if (key === 'text') node.textContent = value;
    else node.setAttribute(key, value === true ? '' : String(value));
  }
  append(node, children);
  return node;
}

function append(node, children) {
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function svg(tag, attrs, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, String(value));
  return append(node, children);
}

function fill(tbody, rows, emptyText, columns) {
  tbody.replaceChildren(...rows);
  if (rows.length === 0) {
    tbody.append(el('tr', {}, el('td', { colspan: columns, class: 'empty' }, emptyText)));
  }
}

// ---------------------------------------------------------------- formatting

function basename(path) {
  if (!path) return '';
  const parts = String(path).split(/[\\/]/);
  return parts[parts.length - 1] || String(path);
}

function toBigInt(value) {
  if (value === null || value === undefined || value === '') return null;
  try {
    return BigInt(value);
  } catch {
    return null;
  }
}

function hex(value) {
  const n = toBigInt(value);
  return n === null ? String(value ?? '') : '0x' + n.toString(16);
}

function bytes(n) {
  if (n === null || n === undefined) return '–';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = Number(n);
  let u = 0;
  while (v >= 1024 && u < units.length - 1) {
    v /= 1024;
    u += 1;
  }
  return (u === 0 ? String(v) : v.toFixed(1)) + ' ' + units[u];
}

function ms(n) {
  if (n === null || n === undefined) return '–';
  return n >= 1000 ? (n / 1000).toFixed(2) + ' s' : Number(n).toFixed(1) + ' ms';
}

function time(value) {
  if (value === null || value === undefined) return '–';
  const d = new Date(value);
  return Number.isNaN(d.getTime()) ? String(value) : d.toLocaleString();
}

function percent(part, whole) {
  return whole > 0 ? Math.round((100 * part) / whole) + ' %' : '–';
}

// ---------------------------------------------------------------- the server

class HttpError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

/** JSON from the server; a non-2xx answer throws with the server's own message. */
async function fetchJson(url, init) {
  const resp = await fetch(url, { cache: 'no-store', credentials: 'same-origin', ...init });
  const text = await resp.text();
  let body = null;
  try {
    body = JSON.parse(text);
  } catch {
    body = null;
  }
  if (!resp.ok) {
    const said = body && (body.message || body.error) ? body.message || body.error : text;
    throw new HttpError(resp.status, `HTTP ${resp.status}: ${String(said).trim() || resp.statusText}`);
  }
  if (body === null) throw new HttpError(resp.status, 'the server did not answer JSON');
  return body;
}

function consoleApi(path) {
  return fetchJson('/console/api/' + path).catch((err) => {
    if (err.status === 401) {
      throw new HttpError(401, 'The console needs this server\'s token. Reload the page and '
        + 'sign in with any user name and the token as the password.');
    }
    throw err;
  });
}

// ---------------------------------------------------------------- reading a crash

/** What was dropped or pasted, and how it is sent: `{kind, label, send}`. */
function detect(data, name) {
  const bytesIn = data instanceof Uint8Array ? data : new TextEncoder().encode(data);
  if (bytesIn.length >= 4 && String.fromCharCode(...bytesIn.subarray(0, 4)) === 'MDMP') {
    return { kind: 'minidump', label: 'a minidump', send: () => sendUpload('/minidump', 'upload_file_minidump', bytesIn, name) };
  }
  const text = typeof data === 'string' ? data : new TextDecoder().decode(bytesIn);
  const trimmed = text.trim();
  if (trimmed.startsWith('{')) {
    let json;
    try {
      json = JSON.parse(trimmed);
    } catch (err) {
      throw new Error('This looks like JSON but does not parse: ' + err.message);
    }
    if (Array.isArray(json.modules) && Array.isArray(json.stacktraces)) {
      return { kind: 'symbolicate', label: 'a /symbolicate request', send: () => sendSymbolicate(json) };
    }
    if (json.debug_meta && Array.isArray(json.debug_meta.images)) {
      const body = fromSentryEvent(json);
      return { kind: 'event', label: 'a Sentry event', send: () => sendSymbolicate(body) };
    }
    throw new Error('This JSON is neither a /symbolicate body (modules and stacktraces) '
      + 'nor a Sentry event (debug_meta.images).');
  }
  if (/Incident Identifier:|^Binary Images:/m.test(text)) {
    return { kind: 'apple', label: 'an Apple crash report', send: () => sendUpload('/applecrashreport', 'apple_crash_report', bytesIn, name) };
  }
  const body = fromPastedStack(text);
  return { kind: 'stack', label: 'a pasted stack', send: () => sendSymbolicate(body) };
}

/** A stored Sentry event as a /symbolicate body. */
function fromSentryEvent(event) {
  const modules = event.debug_meta.images
    .filter((img) => img && NATIVE_TYPES.has(img.type))
    .map((img) => pick(img, ['type', 'debug_id', 'code_id', 'code_file', 'debug_file', 'image_addr', 'image_size', 'arch']));
  const stacktraces = [];
  const exceptions = (event.exception && event.exception.values) || [];
  for (const exc of exceptions) {
    if (exc && exc.stacktrace) stacktraces.push(sentryStack(exc.stacktrace, exc.thread_id, null));
  }
  const threads = (event.threads && event.threads.values) || [];
  for (const thread of threads) {
    if (thread && thread.stacktrace) stacktraces.push(sentryStack(thread.stacktrace, thread.id, thread.name, thread.crashed));
  }
  const usable = stacktraces.filter((st) => st.frames.length > 0);
  if (usable.length === 0) throw new Error('The Sentry event has no native frames with an instruction_addr.');
  // The exception's stack is the one that crashed; a crashed thread only when there is none.
  const crashed = exceptions.some((e) => e && e.stacktrace) ? 0 : usable.findIndex((st) => st.crashed);
  usable.forEach((st, i) => {
    delete st.crashed;
    if (i === Math.max(crashed, 0)) st.is_requesting = true;
  });
  return { modules, stacktraces: usable };
}

function sentryStack(stacktrace, threadId, threadName, crashed) {
  const frames = (stacktrace.frames || [])
    .filter((f) => f && f.instruction_addr !== undefined && f.instruction_addr !== null)
    .map((f) => pick(f, ['instruction_addr', 'addr_mode', 'function']))
    // Sentry stores frames outermost first; symbolication wants the crash site first.
    .reverse();
  const out = { frames, crashed: Boolean(crashed) };
  if (typeof threadId === 'number') out.thread_id = threadId;
  if (threadName) out.thread_name = String(threadName);
  if (stacktrace.registers && typeof stacktrace.registers === 'object') out.registers = stacktrace.registers;
  return out;
}

function pick(obj, keys) {
  const out = {};
  for (const key of keys) if (obj[key] !== undefined && obj[key] !== null) out[key] = obj[key];
  return out;
}

/** The pasted-stack format documented on the page, as a /symbolicate body. */
function fromPastedStack(text) {
  const modules = [];
  const stacktraces = [];
  let section = null;
  text.split(/\r?\n/).forEach((raw, i) => {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) return;
    const where = `line ${i + 1}`;
    const lower = line.toLowerCase();
    if (lower === 'modules' || lower === 'modules:') {
      section = 'modules';
    } else if (lower === 'frames' || lower === 'frames:' || lower.startsWith('thread ')) {
      section = 'frames';
      const st = { frames: [] };
      if (lower.startsWith('thread ')) st.thread_name = line.slice(7).trim();
      stacktraces.push(st);
    } else if (section === 'modules') {
      modules.push(pastedModule(line, where));
    } else if (section === 'frames') {
      if (!/^(0x[0-9a-f]+|[0-9a-f]+)$/i.test(line)) throw new Error(`${where}: "${line}" is not a hex address`);
      const addr = line.toLowerCase().startsWith('0x') ? line : '0x' + line;
      stacktraces[stacktraces.length - 1].frames.push({ instruction_addr: addr });
    } else {
      throw new Error(`${where}: expected a "modules" or "frames" line first. `
        + 'This is not a minidump, crash report, event or request body either.');
    }
  });
  if (stacktraces.every((st) => st.frames.length === 0)) throw new Error('The pasted stack has no frames.');
  stacktraces[0].is_requesting = true;
  return { modules, stacktraces };
}

function pastedModule(line, where) {
  const words = line.split(/\s+/);
  const type = NATIVE_TYPES.has(words[0].toLowerCase()) ? words.shift().toLowerCase() : null;
  if (words.length < 4) throw new Error(`${where}: a module needs image_addr image_size debug_id [code_id] code_file`);
  const [addr, size, debugId] = words;
  // An optional code id before the code file: a bare run of hex digits, as build-ids and
  // PE timestamp+size ids are written.
  const hasCodeId = words.length > 4 && /^[0-9a-f]{8,}$/i.test(words[3]);
  const codeId = hasCodeId ? words[3].toLowerCase() : null;
  const codeFile = words.slice(hasCodeId ? 4 : 3).join(' ');
  // Addresses are always hex; a size may be written either way.
  const imageAddr = toBigInt(/^0x/i.test(addr) ? addr : '0x' + addr);
  const imageSize = toBigInt(size);
  if (imageAddr === null || imageSize === null) throw new Error(`${where}: "${addr} ${size}" is not an address and a size`);
  return {
    type: type || typeFromName(codeFile),
    image_addr: hex(imageAddr),
    image_size: Number(imageSize),
    debug_id: debugId,
    ...(codeId ? { code_id: codeId } : {}),
    code_file: codeFile,
    debug_file: codeFile,
  };
}

function typeFromName(file) {
  const name = file.toLowerCase();
  if (/\.(exe|dll)$/.test(name)) return 'pe';
  if (/\.dylib$/.test(name) || name.includes('.framework/') || name.includes('.app/')) return 'macho';
  return 'elf';
}

// ---------------------------------------------------------------- sending it

function sendUpload(path, part, data, name) {
  const form = new FormData();
  form.append(part, new Blob([data]), name || part);
  form.append('options', JSON.stringify(OPTIONS));
  return settle(fetchJson(path + '?timeout=60', { method: 'POST', body: form }));
}

function sendSymbolicate(body) {
  const request = { ...body, options: { ...(body.options || {}), ...OPTIONS } };
  delete request.sources;
  return settle(fetchJson('/symbolicate?timeout=60', {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(request),
  }));
}

/** Follows `pending` answers until the request is done, one way or another. */
async function settle(first) {
  let answer = await first;
  while (answer.status === 'pending') {
    setCrashStatus('Still working (request ' + answer.request_id + ')…');
    answer = await fetchJson('/requests/' + encodeURIComponent(answer.request_id) + '?timeout=30');
  }
  if (answer.status === 'completed') return answer;
  const said = {
    failed: 'The server could not process it',
    timeout: 'The request timed out on the server',
    internal_error: 'The server had an internal error',
  }[answer.status] || 'Unexpected answer "' + answer.status + '"';
  throw new Error(answer.message ? `${said}: ${answer.message}` : said + '.');
}

function setCrashStatus(text, isError) {
  const status = $('crash-status');
  status.textContent = text;
  status.classList.toggle('error', Boolean(isError));
}

async function run(data, name) {
  let what;
  try {
    what = detect(data, name);
  } catch (err) {
    setCrashStatus(err.message, true);
    return;
  }
  setCrashStatus(`Symbolicating ${what.label}…`);
  $('crash-result').hidden = true;
  try {
    const answer = await what.send();
    const [status, downloads] = await Promise.all([
      consoleApi('status').catch(() => null),
      consoleApi('downloads').catch(() => null),
    ]);
    showCrash(answer, { status, downloads: downloads && downloads.downloads });
    setCrashStatus(`Symbolicated ${what.label}.`);
  } catch (err) {
    setCrashStatus(err.message, true);
  }
}

// ---------------------------------------------------------------- why a frame is not symbolicated

const DOWNLOAD_WORDS = {
  ok: 'found',
  notfound: 'not found',
  noperm: 'no permission',
  malformed: 'malformed',
  error: 'error',
};

/** A candidate's outcome in words, with a deny-listed host's release time. */
function outcome(candidate, denyList) {
  const status = candidate.download && candidate.download.status;
  const denied = status === 'error' ? deniedHost(candidate.location, denyList) : null;
  if (denied) return { words: 'deny-listed until ' + time(denied.until), denied };
  return { words: DOWNLOAD_WORDS[status] || String(status) };
}

function deniedHost(location, denyList) {
  // The deny list holds host names, whatever the port (as upstream's does).
  let host;
  try {
    host = new URL(location).hostname;
  } catch {
    return null;
  }
  return (denyList || []).find((d) => d.host === host) || null;
}

function firstFailure(candidates) {
  return candidates.find((c) => c.download && (c.download.status === 'error' || c.download.status === 'noperm'));
}

/**
 * The one sentence that says why a module's debug file could not serve, by its
 * `debug_status`. Each case: when it applies, and what it says; the first that applies
 * wins. `c` is {module, candidates, denyList}.
 */
const MODULE_CASES = [
  [(c) => c.module.debug_status === 'missing' && c.candidates.length === 0,
    () => 'No debug file was looked for: no configured source covers this module.'],
  [(c) => c.module.debug_status === 'missing',
    (c) => `Module not found on any source (${c.candidates.length} location${c.candidates.length === 1 ? '' : 's'} tried).`],
  [(c) => c.module.debug_status === 'fetching_failed' && c.candidates.some((x) => outcome(x, c.denyList).denied),
    (c) => 'A source is deny-listed after repeated failures: '
      + outcome(c.candidates.find((x) => outcome(x, c.denyList).denied), c.denyList).words + '.'],
  [(c) => c.module.debug_status === 'fetching_failed' && firstFailure(c.candidates),
    (c) => 'A source failed: ' + firstFailure(c.candidates).download.details],
  [(c) => c.module.debug_status === 'fetching_failed', () => 'A source failed while downloading the debug file.'],
  [(c) => c.module.debug_status === 'malformed' && c.candidates.length === 0,
    () => 'The module\'s debug id or code id is malformed, so no file could be looked up.'],
  [(c) => c.module.debug_status === 'malformed', () => 'The debug file found is malformed.'],
  [(c) => c.module.debug_status === 'timeout', () => 'The download timed out.'],
  [(c) => c.module.debug_status === 'too_large', () => 'The debug file is too large to download (max_download_size).'],
  [(c) => c.module.debug_status === 'unsupported', () => 'The file found is of a kind this server cannot read symbols from.'],
  [(c) => c.module.debug_status === 'other', () => 'The lookup failed with an internal error (see the server log).'],
  [(c) => c.module.debug_status === 'unused', () => 'The module was not looked up: no frame needed it.'],
  [(c) => c.module.debug_status === 'found' && !c.module.features.has_debug_info && !c.module.features.has_symbols,
    () => 'A file was found, but it has neither symbols nor debug info.'],
  [(c) => c.module.debug_status === 'found', () => 'The debug file was found and used.'],
];

/**
 * The one sentence that says why a frame is not (fully) symbolicated, or null when it
 * is. Frame-level cases first; a frame whose module is to blame says the module's reason.
 */
const FRAME_CASES = [
  [(c) => c.frame.status === 'symbolicated' && c.frame.lineno, () => null],
  [(c) => c.frame.status === 'unknown_image', () => 'The address is outside every module in the list.'],
  [(c) => !c.module && c.frame.status === 'symbolicated', () => null],
  [(c) => !c.module, () => 'No module in the list covers this address.'],
  [(c) => c.frame.status === 'missing_symbol' && c.module.debug_status === 'found' && !c.module.features.has_symbols && !c.module.features.has_debug_info,
    () => 'The file found has neither symbols nor debug info.'],
  [(c) => c.frame.status === 'missing_symbol' && c.module.debug_status === 'found',
    () => 'The debug file was found, but it has no symbol at this address.'],
  [(c) => c.frame.status === 'symbolicated' && !c.module.features.has_debug_info,
    () => 'Symbol table only: the file found has no line info.'],
  [(c) => c.frame.status === 'symbolicated', () => 'The file found has no line info for this address.'],
  [() => true, (c) => whyModule(c.module, c.denyList)],
];

function firstCase(cases, context) {
  const hit = cases.find(([when]) => when(context));
  return hit ? hit[1](context) : null;
}

function whyModule(module, denyList) {
  return firstCase(MODULE_CASES, { module: withDefaults(module), candidates: module.candidates || [], denyList });
}

function whyFrame(frame, module, denyList) {
  return firstCase(FRAME_CASES, { frame, module: module && withDefaults(module), denyList });
}

function withDefaults(module) {
  return { ...module, features: module.features || {} };
}

/** The module a frame's address belongs to (or the one `rel:N` names). */
function moduleOf(frame, modules) {
  const mode = frame.addr_mode || 'abs';
  if (mode.startsWith('rel:')) return modules[Number(mode.slice(4))] || null;
  const addr = toBigInt(frame.instruction_addr);
  if (addr === null) return null;
  return modules.find((m) => {
    const start = toBigInt(m.image_addr);
    const size = toBigInt(m.image_size);
    return start !== null && size !== null && addr >= start && addr < start + size;
  }) || null;
}

// ---------------------------------------------------------------- the crash view

function showCrash(answer, server) {
  const modules = answer.modules || [];
  const denyList = server.status ? server.status.deny_list : [];
  showFacts(answer);
  const threads = $('threads');
  threads.replaceChildren();
  orderThreads(answer).forEach((st, i) => threads.append(threadView(st, i === 0, modules, denyList)));
  const rows = modules.map((m, i) => moduleRow(m, i, () => showWhy(m, server, denyList)));
  fill($('modules').tBodies[0], rows, 'No modules.', 7);
  $('why').hidden = true;
  $('crash-result').hidden = false;
}

function showFacts(answer) {
  const facts = [];
  const add = (term, value) => {
    if (value !== null && value !== undefined && value !== '') facts.push(el('dt', {}, term), el('dd', {}, String(value)));
  };
  if (answer.crashed !== undefined) add('Crashed', answer.crashed ? 'yes' : 'no');
  add('Reason', answer.crash_reason);
  add('Details', answer.crash_details);
  add('Assertion', answer.assertion);
  if (answer.signal !== undefined && answer.signal !== null) add('Signal', answer.signal);
  const sys = answer.system_info;
  if (sys) add('System', [sys.os_name, sys.os_version, sys.os_build, sys.cpu_arch, sys.device_model].filter(Boolean).join(' '));
  if (answer.timestamp) add('Time', time(answer.timestamp * 1000));
  if (facts.length === 0) add('Threads', (answer.stacktraces || []).length);
  $('crash-facts').replaceChildren(...facts);
}

/** The requesting (crashed) thread first, then the others in their order. */
function orderThreads(answer) {
  const threads = answer.stacktraces || [];
  let first = threads.findIndex((t) => t.is_requesting);
  if (first < 0) first = 0;
  return threads.length ? [threads[first], ...threads.filter((_, i) => i !== first)] : [];
}

function threadView(st, isFirst, modules, denyList) {
  const name = [
    st.thread_id !== undefined ? 'Thread ' + st.thread_id : 'Thread',
    st.thread_name ? `“${st.thread_name}”` : null,
    st.is_requesting ? '(crashed)' : null,
  ].filter(Boolean).join(' ');
  const list = el('ol', { class: 'frames' });
  groupInlined(st.frames || []).forEach((group, i) => list.append(frameGroup(group, i, modules, denyList)));
  return el('details', { class: 'thread', open: isFirst, 'data-thread': st.thread_id },
    el('summary', {}, el('span', { class: 'thread-name' }, name), ` – ${(st.frames || []).length} frames`),
    list);
}

/** Frames sharing an `original_index` are one real frame and the frames inlined into it. */
function groupInlined(frames) {
  const groups = [];
  for (const frame of frames) {
    const last = groups[groups.length - 1];
    if (last && frame.original_index !== undefined && frame.original_index !== null
      && last[0].original_index === frame.original_index) last.push(frame);
    else groups.push([frame]);
  }
  return groups;
}

function frameGroup(group, index, modules, denyList) {
  const real = group[group.length - 1];
  const item = el('li', { class: 'frame', value: index }, frameView(real, modules, denyList, false));
  const inlined = group.slice(0, -1);
  if (inlined.length) {
    item.append(el('ul', { class: 'inlined', 'aria-label': 'Inlined into this frame' },
      inlined.map((f) => el('li', {}, frameView(f, modules, denyList, true)))));
  }
  return item;
}

function frameView(frame, modules, denyList, inlined) {
  const module = moduleOf(frame, modules);
  const name = frame.function || frame.symbol || '<unknown>';
  const file = frame.filename || frame.abs_path;
  const where = file ? basename(file) + (frame.lineno ? ':' + frame.lineno : '') : null;
  const pkg = frame.package || (module && module.code_file);
  const line = el('div', { class: 'frame-line' },
    inlined ? el('span', { class: 'badge' }, 'inlined') : null,
    el('span', { class: 'function' }, name),
    where ? el('span', { class: 'file', title: frame.abs_path || file }, where) : null,
    pkg ? el('span', { class: 'package', title: pkg }, basename(pkg)) : null,
    el('code', { class: 'addr' }, hex(frame.instruction_addr)),
    frame.status !== 'symbolicated' ? el('span', { class: 'badge status-bad' }, String(frame.status).replace(/_/g, ' ')) : null);
  const reason = whyFrame(frame, module, denyList);
  const parts = [line];
  if (reason) parts.push(el('p', { class: frame.status === 'symbolicated' ? 'reason note' : 'reason' }, reason));
  if (frame.context_line !== undefined && frame.context_line !== null) parts.push(sourceContext(frame));
  return parts;
}

function sourceContext(frame) {
  const pre = frame.pre_context || [];
  const post = frame.post_context || [];
  const first = frame.lineno ? frame.lineno - pre.length : null;
  const lines = [...pre, frame.context_line, ...post].map((text, i) => {
    const current = i === pre.length;
    return el('span', { class: current ? 'line current' : 'line' },
      el('span', { class: 'lineno', 'aria-hidden': 'true' }, first === null ? '' : String(first + i)),
      text, '\n');
  });
  return el('details', { class: 'source' }, el('summary', {}, 'Source'), el('pre', {}, lines));
}

function statusCell(status) {
  if (!status) return el('td', {}, '–');
  const good = status === 'found' || status === 'unused';
  return el('td', {}, el('span', { class: good ? 'badge' : 'badge status-bad' }, status.replace(/_/g, ' ')));
}

function moduleRow(m, index, open) {
  const features = m.features || {};
  const has = [
    features.has_debug_info && 'debug info',
    features.has_unwind_info && 'unwind info',
    features.has_symbols && 'symbols',
    features.has_sources && 'sources',
  ].filter(Boolean).join(', ') || 'nothing';
  const button = el('button', { type: 'button', class: 'link', 'data-module': index },
    basename(m.code_file || m.debug_file) || m.debug_id || `module ${index + 1}`);
  button.addEventListener('click', open);
  const start = toBigInt(m.image_addr);
  const size = toBigInt(m.image_size);
  return el('tr', { 'data-debug-status': m.debug_status },
    el('th', { scope: 'row', title: m.code_file || '' }, button),
    el('td', {}, el('code', {}, m.debug_id || '–')),
    el('td', {}, el('code', {}, start === null ? '–' : hex(start) + (size === null ? '' : '–' + hex(start + size)))),
    el('td', {}, m.arch || '–'),
    statusCell(m.debug_status),
    statusCell(m.unwind_status),
    el('td', {}, has));
}

function showWhy(m, server, denyList) {
  const why = $('why');
  $('why-heading').textContent = 'Why not? ' + (basename(m.code_file || m.debug_file) || m.debug_id || 'module');
  $('why-reason').textContent = whyModule(m, denyList);
  const facts = [];
  for (const [term, value] of [['Code file', m.code_file], ['Debug file', m.debug_file], ['Debug id', m.debug_id], ['Code id', m.code_id], ['Type', m.type]]) {
    if (value) facts.push(el('dt', {}, term), el('dd', {}, value));
  }
  $('why-module').replaceChildren(...facts);
  const rows = (m.candidates || []).map((c) => candidateRow(c, denyList, server.downloads));
  fill($('candidates').tBodies[0], rows, 'No location was tried.', 5);
  why.hidden = false;
  $('why-heading').focus();
}

function candidateRow(c, denyList, downloads) {
  const said = outcome(c, denyList);
  const details = c.download && c.download.details;
  const uses = [['debug info', c.debug], ['unwind info', c.unwind]]
    .filter(([, use]) => use && use.status && use.status !== 'none')
    .map(([what, use]) => (use.status === 'ok' ? what : `${what}: ${use.status}${use.details ? ' (' + use.details + ')' : ''}`));
  return el('tr', { 'data-outcome': said.words },
    el('td', {}, c.source),
    el('td', { class: 'location' }, c.location),
    el('td', {}, el('span', { class: c.download && c.download.status === 'ok' ? 'badge' : 'badge status-bad' }, said.words),
      details && !said.denied ? el('div', { class: 'details' }, details) : null),
    el('td', {}, uses.join('; ') || '–'),
    el('td', {}, downloadRecord(c, downloads)));
}

function downloadRecord(c, downloads) {
  if (!downloads) return 'no download records (the console API did not answer)';
  const record = downloads.find((d) => d.source === c.source && d.location === c.location);
  if (!record) return 'answered from the cache';
  const size = record.bytes === null || record.bytes === undefined ? '' : ', ' + bytes(record.bytes);
  return `${record.outcome.replace(/_/g, ' ')} in ${ms(record.duration_ms)}${size} at ${time(record.time)}`;
}

// ---------------------------------------------------------------- the status view

let statusTimer = null;
let statusBusy = false;

async function refreshStatus() {
  statusTimer = null;
  statusBusy = true;
  try {
    showStatus(await consoleApi('status'));
    $('status-message').textContent = 'Updated ' + new Date().toLocaleTimeString() + '.';
    $('status-message').classList.remove('error');
  } catch (err) {
    $('status-message').textContent = err.message;
    $('status-message').classList.add('error');
  } finally {
    statusBusy = false;
  }
  if (!$('view-status').hidden && statusTimer === null) statusTimer = setTimeout(refreshStatus, STATUS_EVERY_MS);
}

function showStatus(s) {
  const req = s.requests;
  $('status-body').hidden = false;
  const facts = [
    ['In flight', `${req.in_flight} of ${req.max_concurrent}`],
    ['Version', s.version],
    ['Started', time(s.started)],
  ];
  $('status-facts').replaceChildren(...facts.flatMap(([t, v]) => [el('dt', {}, t), el('dd', { 'data-fact': t }, v)]));

  $('recent-count').textContent = String(req.recent.length);
  fill($('recent').tBodies[0], req.recent.map((r) => el('tr', {},
    el('td', {}, time(r.time)),
    el('td', {}, `${r.method} ${r.endpoint}`),
    el('td', { class: r.status >= 400 ? 'bad' : null }, String(r.status)),
    el('td', {}, ms(r.duration_ms)),
    el('td', {}, el('code', {}, r.request_id || '–')))), 'No requests yet.', 5);

  fill($('sources').tBodies[0], s.sources.map((src) => el('tr', {},
    el('th', { scope: 'row' }, src.id),
    el('td', {}, src.type),
    el('td', {}, String(src.downloads)),
    el('td', {}, String(src.ok)),
    el('td', {}, String(src.not_found)),
    el('td', { class: src.failed ? 'bad' : null }, String(src.failed)),
    el('td', {}, bytes(src.bytes)),
    el('td', {}, ms(src.mean_ms)),
    el('td', {}, src.last_error ? `${src.last_error} (${time(src.last_time)})` : '–'))), 'No source has been asked for a file yet.', 9);

  fill($('downloading').tBodies[0], (s.downloading || []).map((d) => el('tr', {},
    el('th', { scope: 'row' }, d.name),
    el('td', {}, time(d.started)),
    el('td', {}, bytes(d.bytes)),
    el('td', {}, bytes(d.total)),
    el('td', {}, d.total ? percent(d.bytes, d.total) : '–'))), 'No download is running.', 5);

  fill($('deny').tBodies[0], s.deny_list.map((d) => el('tr', {},
    el('th', { scope: 'row' }, d.host),
    el('td', {}, d.reason),
    el('td', {}, time(d.since)),
    el('td', {}, time(d.until)))), 'No host is deny-listed.', 4);

  $('disk').textContent = diskUse(s.caches.disk);
  fill($('caches').tBodies[0], s.caches.kinds.map((k) => el('tr', {},
    el('th', { scope: 'row' }, k.kind),
    el('td', {}, String(k.hits)),
    el('td', {}, String(k.misses)),
    el('td', {}, String(k.errors)),
    el('td', {}, percent(k.hits, k.hits + k.misses)),
    el('td', {}, String(k.disk_files)),
    el('td', {}, bytes(k.disk_bytes)))), 'No cache activity yet.', 7);

  showCharts(s.series);
}

function diskUse(disk) {
  if (disk.used_bytes === null || disk.used_bytes === undefined) return 'Disk: not measured yet.';
  // A walk cut short at console.max_disk_walk_entries counted only part of the cache.
  const used = (disk.complete === false ? 'at least ' : '') + bytes(disk.used_bytes);
  const budget = disk.max_bytes === null || disk.max_bytes === undefined
    ? ', no budget set'
    : ` of ${bytes(disk.max_bytes)} (${percent(disk.used_bytes, disk.max_bytes)})`;
  return `Disk: ${used} used${budget}` + (disk.measured ? `, measured ${time(disk.measured)}.` : '.');
}

// [key, title, whether the value counts events per interval, value of a point, format]
const CHARTS = [
  ['requests', 'Requests', true, (p) => p.requests, String],
  ['errors', 'Errors', true, (p) => p.errors, String],
  ['in_flight', 'In flight', false, (p) => p.in_flight, String],
  ['downloads', 'Downloads', true, (p) => p.downloads, String],
  ['hit_rate', 'Cache hit rate', false, (p) => (p.cache_hits + p.cache_misses > 0 ? (100 * p.cache_hits) / (p.cache_hits + p.cache_misses) : null), (v) => Math.round(v) + ' %'],
  ['latency', 'Mean latency', false, (p) => p.latency_ms, (v) => ms(v)],
];

function showCharts(series) {
  const points = series.points || [];
  const every = series.interval_seconds;
  $('charts').replaceChildren(...CHARTS.map(([key, title, counts, value, format]) =>
    chart(key, counts ? `${title} per ${every} s` : title, points.map((p) => ({ t: p.time, v: value(p) })), format, every)));
}

/** A small line chart; gaps (null values) break the line. */
function chart(key, title, data, format, every) {
  const W = 300;
  const H = 90;
  const left = 48;
  const top = 8;
  const bottom = 16;
  const values = data.map((d) => d.v).filter((v) => v !== null && v !== undefined);
  const max = Math.max(1, ...values);
  const latest = data.length ? data[data.length - 1].v : null;
  const spanSeconds = Math.max(0, data.length - 1) * every;
  const span = spanSeconds < 120 ? `${spanSeconds} s` : `${Math.round(spanSeconds / 60)} min`;
  const summary = `${title}: latest ${latest === null || latest === undefined ? 'no value' : format(latest)}, `
    + `highest ${values.length ? format(Math.max(...values)) : 'no value'} over the last ${span}`;
  const x = (i) => left + (data.length > 1 ? (i * (W - left - 4)) / (data.length - 1) : 0);
  const y = (v) => top + (H - top - bottom) * (1 - v / max);
  const lines = [];
  let run = [];
  data.forEach((d, i) => {
    if (d.v === null || d.v === undefined) {
      if (run.length) lines.push(run);
      run = [];
    } else {
      run.push(`${x(i).toFixed(1)},${y(d.v).toFixed(1)}`);
    }
  });
  if (run.length) lines.push(run);
  const graphic = svg('svg', { viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': summary, class: 'chart', 'data-chart': key },
    svg('title', {}, summary),
    svg('line', { x1: left, y1: H - bottom, x2: W - 4, y2: H - bottom, class: 'axis' }),
    svg('line', { x1: left, y1: top, x2: left, y2: H - bottom, class: 'axis' }),
    svg('text', { x: left - 4, y: top + 8, 'text-anchor': 'end' }, format(max)),
    svg('text', { x: left - 4, y: H - bottom, 'text-anchor': 'end' }, '0'),
    svg('text', { x: left, y: H - 3 }, '−' + span),
    svg('text', { x: W - 4, y: H - 3, 'text-anchor': 'end' }, 'now'),
    lines.map((pts) => (pts.length === 1
      ? svg('circle', { cx: pts[0].split(',')[0], cy: pts[0].split(',')[1], r: 2, class: 'series' })
      : svg('polyline', { points: pts.join(' '), class: 'series' }))));
  return el('figure', { class: 'chart-box' },
    el('figcaption', {}, title, ' ', el('strong', {}, latest === null || latest === undefined ? '–' : format(latest))),
    graphic);
}

// ---------------------------------------------------------------- wiring

function showView(name) {
  for (const view of ['crash', 'status']) {
    $('view-' + view).hidden = view !== name;
    $('show-' + view).setAttribute('aria-pressed', String(view === name));
  }
  if (name === 'status') {
    if (statusTimer === null && !statusBusy) refreshStatus();
  } else if (statusTimer !== null) {
    clearTimeout(statusTimer);
    statusTimer = null;
  }
}

async function runFile(file) {
  if (!file) return;
  run(new Uint8Array(await file.arrayBuffer()), file.name);
}

function init() {
  $('show-crash').addEventListener('click', () => showView('crash'));
  $('show-status').addEventListener('click', () => showView('status'));
  $('crash-file').addEventListener('change', (e) => runFile(e.target.files[0]));
  $('crash-form').addEventListener('submit', (e) => {
    e.preventDefault();
    const text = $('crash-text').value;
    if (text.trim() === '') setCrashStatus('Paste something first, or choose a file.', true);
    else run(text, 'pasted');
  });
  const zone = $('drop-zone');
  zone.addEventListener('dragover', (e) => {
    e.preventDefault();
    zone.classList.add('over');
  });
  zone.addEventListener('dragleave', () => zone.classList.remove('over'));
  zone.addEventListener('drop', (e) => {
    e.preventDefault();
    zone.classList.remove('over');
    runFile(e.dataTransfer.files[0]);
  });
  if (location.hash === '#status') showView('status');
}

init();
