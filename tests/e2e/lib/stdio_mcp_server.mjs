// A small MCP server over stdio (newline-delimited JSON-RPC), run by fawn
// inside a thread's sandbox. Its tools tell what it sees there: its
// environment, whether it runs among the thread's files, and a description
// read from a file the test can change (drift). `sleep` never answers; with
// a `tag` it takes the process title mcp-sleep-<tag>, by which the host sees
// whether it still runs.
import fs from 'node:fs';
import path from 'node:path';
import readline from 'node:readline';

const here = path.dirname(new URL(import.meta.url).pathname);
const send = (msg) => process.stdout.write(`${JSON.stringify({ jsonrpc: '2.0', ...msg })}\n`);
const text = (t) => ({ content: [{ type: 'text', text: t }] });
const obj = { type: 'object', properties: {} };

function tools() {
  let described = 'Says what it describes';
  try { described = fs.readFileSync(path.join(here, 'description.txt'), 'utf8').trim(); } catch { /* the default */ }
  return [
    { name: 'env', description: 'Lists its environment', inputSchema: obj },
    { name: 'where', description: 'Says where it runs', inputSchema: obj },
    { name: 'described', description: described, inputSchema: obj },
    { name: 'sleep', description: 'Never answers', inputSchema: obj },
    { name: 'echo', description: 'Answers its arguments', inputSchema: obj },
  ];
}

function call(id, name, args) {
  switch (name) {
    case 'echo': return send({ id, result: text(JSON.stringify(args)) });
    case 'env': return send({ id, result: text(JSON.stringify(process.env)) });
    case 'where': return send({ id, result: text(`workspace=${fs.existsSync('/mnt/user-data/workspace')} uid=${process.getuid()}`) });
    case 'described': return send({ id, result: text('described answer') });
    case 'sleep':
      if (typeof args?.tag === 'string') process.title = `mcp-sleep-${args.tag}`;
      setTimeout(() => {}, 3600 * 1000);
      return undefined;
    default: return send({ id, error: { code: -32602, message: `unknown tool ${name}` } });
  }
}

readline.createInterface({ input: process.stdin }).on('line', (line) => {
  if (!line.trim()) return;
  const msg = JSON.parse(line);
  if (msg.id === undefined) return;
  if (msg.method === 'initialize') return send({ id: msg.id, result: { protocolVersion: '2025-06-18', capabilities: { tools: {} }, serverInfo: { name: 'stdio-test', version: '1' } } });
  if (msg.method === 'tools/list') return send({ id: msg.id, result: { tools: tools() } });
  if (msg.method === 'tools/call') return call(msg.id, msg.params.name, msg.params.arguments);
  return send({ id: msg.id, error: { code: -32601, message: 'Method not found' } });
});
