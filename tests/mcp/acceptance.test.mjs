// Acceptance of cellvm-mcp through the official MCP TypeScript SDK client, over stdio.
//
//   CELLVM_MCP=build/cellvm-mcp node --test tests/mcp/acceptance.test.mjs
//
// The server is started as examples/cellvm-mcp.json says (its command replaced by
// $CELLVM_MCP, its args extended by $CELLVM_MCP_ARGS, a JSON array). Each test names one
// thing cellvm-mcp promises an agent (docs/mcp.md).
import { strict as assert } from 'node:assert';
import { readFileSync, readdirSync } from 'node:fs';
import { after, before, describe, test } from 'node:test';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { LATEST_PROTOCOL_VERSION } from '@modelcontextprotocol/sdk/types.js';

const ROOT = new URL('../../', import.meta.url).pathname;
const CONFIG = JSON.parse(readFileSync(`${ROOT}examples/cellvm-mcp.json`, 'utf8')).mcpServers.cellvm;
const COMMAND = process.env.CELLVM_MCP || `${ROOT}build/cellvm-mcp`;
const ARGS = [...CONFIG.args, ...JSON.parse(process.env.CELLVM_MCP_ARGS || '[]')];
const CALL = { timeout: 180_000 };

let client, transport, stderr = '';

async function connect () {
  const t = new StdioClientTransport({ command: COMMAND, args: ARGS, stderr: 'pipe',
                                       env: { ...process.env, ...CONFIG.env } });
  t.stderr.on('data', d => { stderr += d; });
  const c = new Client({ name: 'cellvm-acceptance', version: '1.0.0' });
  await c.connect(t);
  return [c, t];
}

async function run (code, extra = {}, options = {}) {
  return client.callTool({ name: 'run_python', arguments: { code, ...extra } }, undefined,
                         { ...CALL, ...options });
}

const text = r => r.content.filter(c => c.type === 'text').map(c => c.text).join('\n');

// Every process below pid (from /proc): the gateways, and what they started.
function descendants (pid) {
  const kids = new Map();
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const stat = readFileSync(`/proc/${d}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (!kids.has(ppid)) kids.set(ppid, []);
      kids.get(ppid).push(Number(d));
    } catch { /* gone meanwhile */ }
  }
  const out = [];
  const walk = p => { for (const k of kids.get(p) || []) { out.push(k); walk(k); } };
  walk(pid);
  return out;
}

const alive = pid => { try { process.kill(pid, 0); return true; } catch { return false; } };
const sleep = ms => new Promise(resolve => setTimeout(resolve, ms));

describe('cellvm-mcp over stdio with the MCP SDK client', () => {
  before(async () => { [client, transport] = await connect(); });
  after(async () => { await client?.close(); });

  test('negotiates the SDK\'s latest revision and lists the six tools', async () => {
    assert.equal(LATEST_PROTOCOL_VERSION, '2025-11-25');
    assert.equal(client.getServerVersion().name, 'cellvm-mcp');
    const { tools } = await client.listTools();
    assert.deepEqual(tools.map(t => t.name).sort(),
                     ['close', 'download_file', 'list_files', 'restart', 'run_python', 'upload_file']);
  });

  test('state persists across run_python calls', async () => {
    await run('x = 41');
    const r = await run('x + 1');
    assert.equal(r.isError, false);
    assert.equal(r.structuredContent.result, '42');
    assert.match(text(r), /Out\[\d+\]/);
    assert.ok(r.structuredContent.execution_count >= 2);
    assert.equal(typeof r.structuredContent.elapsed_s, 'number');
  });

  test('an error is data: isError, ename, evalue, traceback without ANSI codes', async () => {
    const r = await run('def f():\n    return 1/0\nf()');
    assert.equal(r.isError, true);
    const e = r.structuredContent.error;
    assert.equal(e.ename, 'ZeroDivisionError');
    assert.equal(e.evalue, 'division by zero');
    assert.match(e.traceback, /in f\(\)|line 2/);
    assert.ok(!e.traceback.includes('\x1b'), 'ANSI codes left in the traceback');
    assert.ok(!text(r).includes('\x1b'));
  });

  test('5 MB of output comes back truncated head and tail', async () => {
    const r = await run("print('HEAD-LINE')\nprint(('0123456789' * 10 + '\\n') * 50000)\nprint('TAIL-LINE')");
    const sc = r.structuredContent;
    assert.equal(r.isError, false);
    assert.ok(sc.stdout_bytes > 5_000_000, `stdout_bytes ${sc.stdout_bytes}`);
    assert.ok(sc.stdout.length < 25_000, `stdout kept ${sc.stdout.length}`);
    assert.ok(sc.stdout.startsWith('HEAD-LINE'));
    assert.ok(sc.stdout.trimEnd().endsWith('TAIL-LINE'));
    assert.match(sc.stdout, /\[\.\.\. \d{1,3}(,\d{3})+ bytes omitted \.\.\.\]/);
    assert.match(text(r), /bytes omitted/);
  });

  test('a matplotlib chart comes back as an image', async () => {
    const r = await run('import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.title("chart")\nplt.show()');
    const img = r.content.find(c => c.type === 'image');
    assert.ok(img, `no image in ${JSON.stringify(r.content).slice(0, 400)}`);
    assert.equal(img.mimeType, 'image/png');
    assert.equal(Buffer.from(img.data, 'base64').subarray(1, 4).toString(), 'PNG');
  });

  test('an HTML table is text', async () => {
    const r = await run('import pandas as pd\nfrom IPython.display import HTML, display\n'
                        + 'display(HTML(pd.DataFrame({"a": [1, 2], "b": [3, 4]}).to_html()))');
    assert.match(text(r), /a \| b/);
    assert.ok(!text(r).includes('<table'));
  });

  test('a file in /workspace/out is a resource link, then comes through download_file', async () => {
    const r = await run("open('/workspace/out/result.csv', 'w').write('a,b\\n1,2\\n')");
    const link = r.content.find(c => c.type === 'resource_link');
    assert.ok(link, JSON.stringify(r.content));
    assert.equal(link.uri, 'cellvm://default/workspace/out/result.csv');
    assert.equal(link.mimeType, 'text/csv');
    const f = r.structuredContent.output_files[0];
    assert.equal(f.path, '/workspace/out/result.csv');
    assert.equal(f.size, 8);
    assert.match(f.sha256, /^[0-9a-f]{64}$/);
    const d = await client.callTool({ name: 'download_file', arguments: { path: f.path } }, undefined, CALL);
    const res = d.content.find(c => c.type === 'resource');
    assert.equal(res.resource.text, 'a,b\n1,2\n');
    assert.equal(d.structuredContent.sha256, f.sha256);
    const rr = await client.readResource({ uri: link.uri }, CALL);
    assert.equal(rr.contents[0].text, 'a,b\n1,2\n');
  });

  test('an upload is readable from the next cell; bytes too', async () => {
    let u = await client.callTool({ name: 'upload_file', arguments: { path: 'data/in.txt', text: 'hello upload' } }, undefined, CALL);
    assert.equal(u.isError, false, text(u));
    let r = await run("open('/workspace/data/in.txt').read()");
    assert.equal(r.structuredContent.result, "'hello upload'");
    const bytes = Buffer.from([0, 1, 2, 255, 254]);
    u = await client.callTool({ name: 'upload_file', arguments: { path: '/workspace/data/b.bin', content_base64: bytes.toString('base64') } }, undefined, CALL);
    assert.equal(u.structuredContent.size, 5);
    r = await run("list(open('/workspace/data/b.bin', 'rb').read())");
    assert.equal(r.structuredContent.result, '[0, 1, 2, 255, 254]');
    const l = await client.callTool({ name: 'list_files', arguments: { path: 'data' } }, undefined, CALL);
    assert.match(text(l), /in\.txt\s+12 bytes/);
  });

  test('paths that leave /workspace are refused in words', async () => {
    for (const path of ['/etc/passwd', '../etc/passwd', 'data/../../x']) {
      const r = await client.callTool({ name: 'download_file', arguments: { path } }, undefined, CALL);
      assert.equal(r.isError, true);
      assert.match(text(r), /PathOutsideWorkspace/);
    }
  });

  test('two named sessions are isolated', async () => {
    await run("secret = 'a'\nopen('/workspace/only_a.txt', 'w').write('a')", { session: 'a' });
    const r = await run("import os\n('secret' in globals(), os.path.exists('/workspace/only_a.txt'))", { session: 'b' });
    assert.equal(r.structuredContent.result, '(False, False)');
    assert.equal(r.structuredContent.session, 'b');
    const a = await run('secret', { session: 'a' });
    assert.equal(a.structuredContent.result, "'a'");
    for (const session of ['a', 'b']) {
      const c = await client.callTool({ name: 'close', arguments: { session } }, undefined, CALL);
      assert.match(text(c), /Closed session/);
    }
  });

  test('a kill -9 inside a cell is explained, and the next call works', async () => {
    const r = await run('import os, signal\nos.kill(os.getpid(), signal.SIGKILL)');
    assert.equal(r.isError, true);
    assert.equal(r.structuredContent.status, 'died');
    assert.match(text(r), /kernel died/i);
    assert.match(text(r), /signal 9|SIGKILL/);
    assert.match(text(r), /lost/i);
    const n = await run('6 * 7');
    assert.equal(n.isError, false, text(n));
    assert.equal(n.structuredContent.result, '42');
  });

  test('a timeout is explained, with progress on the way; variables are kept', async () => {
    await run('kept = 5');
    const progress = [];
    const r = await run('import time\ntime.sleep(60)', { timeout_s: 4 },
                        { onprogress: p => progress.push(p) });
    assert.equal(r.isError, true);
    assert.equal(r.structuredContent.status, 'timeout');
    assert.match(text(r), /time limit of 4 s/);
    assert.ok(progress.length >= 1, 'no notifications/progress');
    const k = await run('kept');
    assert.equal(k.structuredContent.result, '5');
  });

  test('restart: a fresh interpreter, /workspace kept', async () => {
    await run("gone = 1\nopen('/workspace/keep.txt', 'w').write('k')");
    const r = await client.callTool({ name: 'restart', arguments: {} }, undefined, CALL);
    assert.match(text(r), /Restarted/);
    const n = await run("import os\n('gone' in globals(), open('/workspace/keep.txt').read())");
    assert.equal(n.structuredContent.result, "(False, 'k')");
  });

  test('bad calls get JSON-RPC errors with clear messages', async () => {
    await assert.rejects(client.callTool({ name: 'no_such_tool', arguments: {} }),
                         e => e.code === -32602 && /Unknown tool/.test(e.message));
    await assert.rejects(client.callTool({ name: 'run_python', arguments: { code: 5 } }),
                         e => e.code === -32602 && /"code" must be a string/.test(e.message));
    await assert.rejects(client.callTool({ name: 'run_python', arguments: { code: '1', bogus: 1 } }),
                         e => e.code === -32602 && /no argument "bogus"/.test(e.message));
  });

  test('closing the client leaves no process', async () => {
    await run('1', { session: 'extra' });
    const server = transport.pid;
    const kids = descendants(server);
    assert.ok(kids.length >= 2, `expected gateways under ${server}: ${kids}`);
    await client.close();
    client = null;
    for (let i = 0; i < 100 && [server, ...kids].some(alive); i++)
      await sleep(100);
    assert.deepEqual([server, ...kids].filter(alive), [], `left running; server stderr:\n${stderr.slice(-2000)}`);
  });
});
