// A tiny static file server for the page and its tests (node's http module only).
//
//   node tests/browser/server.mjs [port]     serves the repo root (cross-origin isolated: the
//                                            threaded CPU build runs), prints the URL
//
// /hub/<owner>/<repo>/resolve/<rev>/<file> stands in for the Hugging Face hub: it serves
// <hubDir>/<owner>/<repo>/<file>, hubDir from start()'s options or the HUB_DIR environment
// variable. Every file goes out with its Content-Length (the page's download progress needs it).
// A file asked for with `?throttle=MS` goes out in 16 pieces MS ms apart; /__throttled answers
// how many such responses were sent whole and how many the client abandoned midway (tests of
// aborted downloads).

import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');

const MIME = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.json': 'application/json; charset=utf-8',
  '.wasm': 'application/wasm',
  '.safetensors': 'application/octet-stream',
  '.png': 'image/png',
  '.jpg': 'image/jpeg',
  '.jpeg': 'image/jpeg',
  '.webp': 'image/webp',
  '.gif': 'image/gif',
  '.svg': 'image/svg+xml',
  '.ico': 'image/x-icon',
  '.txt': 'text/plain; charset=utf-8',
  '.md': 'text/markdown; charset=utf-8',
  '.map': 'application/json; charset=utf-8',
  '.ts': 'text/plain; charset=utf-8',
};

/** `child` resolved under `root`, or null when it would escape it. */
function inside(root, child) {
  const full = path.resolve(root, '.' + path.sep + child);
  return full === root || full.startsWith(root + path.sep) ? full : null;
}

function send(res, status, text, headers = {}) {
  res.writeHead(status, { 'Content-Type': 'text/plain; charset=utf-8', 'Content-Length': Buffer.byteLength(text), ...headers });
  res.end(text);
}

function serveFile(req, res, file, extraHeaders = {}) {
  fs.stat(file, (err, st) => {
    if (!err && st.isDirectory()) return serveFile(req, res, path.join(file, 'index.html'), extraHeaders);
    if (err || !st.isFile()) return send(res, 404, `not found: ${req.url}\n`, extraHeaders);
    res.writeHead(200, {
      'Content-Type': MIME[path.extname(file).toLowerCase()] ?? 'application/octet-stream',
      'Content-Length': st.size,
      'Cache-Control': 'no-store',
      ...extraHeaders,
    });
    if (req.method === 'HEAD') return res.end();
    const stream = fs.createReadStream(file);
    stream.on('error', () => res.destroy());
    stream.pipe(res);
  });
}

/** Sends `file` in 16 pieces `ms` apart, counting in `counts` whether the client took it all. */
function serveThrottled(req, res, file, ms, counts) {
  fs.readFile(file, (err, body) => {
    if (err) return send(res, 404, `not found: ${req.url}\n`);
    res.writeHead(200, { 'Content-Type': MIME[path.extname(file).toLowerCase()] ?? 'application/octet-stream', 'Content-Length': body.length, 'Cache-Control': 'no-store' });
    const step = Math.ceil(body.length / 16);
    let at = 0;
    let timer = null;
    res.on('close', () => {
      clearTimeout(timer);
      if (at < body.length) counts.abandoned += 1;
    });
    const next = () => {
      res.write(body.subarray(at, at + step));
      at += step;
      if (at >= body.length) {
        counts.completed += 1;
        res.end();
      } else {
        timer = setTimeout(next, ms);
      }
    };
    next();
  });
}

/**
 * Starts the server on 127.0.0.1 (a secure context for the browser, so WebGPU and the Cache API
 * are available). opts: {root = repo root, hubDir = $HUB_DIR, isolated = false}; `isolated` adds the
 * COOP/COEP headers that make the page cross-origin isolated (SharedArrayBuffer, so
 * tokenmix's threaded build and onnxruntime-web's wasm backend can use threads). Resolves to {url, port, close()}.
 */
export function start(port = 0, opts = {}) {
  const root = path.resolve(opts.root ?? REPO_ROOT);
  const hubDir = () => opts.hubDir ?? process.env.HUB_DIR;
  const throttled = { completed: 0, abandoned: 0 };
  const server = http.createServer((req, res) => {
    if (opts.isolated) {
      res.setHeader('Cross-Origin-Opener-Policy', 'same-origin');
      res.setHeader('Cross-Origin-Embedder-Policy', 'require-corp');
    }
    if (req.method !== 'GET' && req.method !== 'HEAD') return send(res, 405, 'method not allowed\n', { Allow: 'GET, HEAD' });
    let pathname;
    try {
      pathname = decodeURIComponent(new URL(req.url, 'http://localhost').pathname);
    } catch {
      return send(res, 400, 'bad request\n');
    }
    if (pathname.includes('\0')) return send(res, 400, 'bad request\n');

    const hub = pathname.match(/^\/hub\/([^/]+)\/([^/]+)\/resolve\/[^/]+\/(.+)$/);
    if (hub) {
      const cors = { 'Access-Control-Allow-Origin': '*' }; // as the real hub answers
      const dir = hubDir();
      if (!dir) return send(res, 404, 'no HUB_DIR configured\n', cors);
      const file = inside(path.resolve(dir), path.join(hub[1], hub[2], hub[3]));
      return file ? serveFile(req, res, file, cors) : send(res, 403, 'forbidden\n', cors);
    }
    if (pathname.startsWith('/hub/')) return send(res, 404, `not found: ${pathname}\n`);

    if (pathname === '/__throttled') return send(res, 200, JSON.stringify(throttled), { 'Content-Type': 'application/json', 'Cache-Control': 'no-store' });
    const file = inside(root, pathname === '/' ? 'index.html' : pathname.slice(1));
    if (!file) return send(res, 403, 'forbidden\n');
    const throttle = Number(new URL(req.url, 'http://localhost').searchParams.get('throttle'));
    if (throttle > 0 && req.method === 'GET') return serveThrottled(req, res, file, Math.min(throttle, 5000), throttled);
    serveFile(req, res, file);
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => {
      const { port: actual } = server.address();
      resolve({
        url: `http://127.0.0.1:${actual}`,
        port: actual,
        close: () => new Promise((done) => {
          server.closeAllConnections?.();
          server.close(() => done());
        }),
      });
    });
  });
}

if (process.argv[1] && import.meta.url === pathToFileURL(path.resolve(process.argv[1])).href) {
  const port = process.argv[2] ? Number(process.argv[2]) : 8000;
  // Cross-origin isolated, as a page that wants the threaded CPU build must be served (the
  // page's own files, the hub stand-in and the real hub all pass COEP's check).
  const { url } = await start(port, { isolated: true });
  console.log(`tokenmix page: ${url}/  (hub stand-in: ${url}/hub/… from ${process.env.HUB_DIR ?? '(HUB_DIR unset)'})`);
}
