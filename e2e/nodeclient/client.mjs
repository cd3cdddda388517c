// What GitHub's runner-container-hooks (k8s mode) do with a job pod through
// @kubernetes/client-node 1.x, step by step, printed as one JSON object
// that depends on the pod and never on the server the program talked to:
// e2e TestNodeClient runs it through the gateway and against the member
// directly and wants the same object. The hooks' own calls: an exec with
// stdin (WebSocket, v5.channel.k8s.io, whose close ends stdin), exit
// codes from the status, files copied with tar over exec both ways and
// checked by hash, a pod watch, a log follow; and a port-forward.
//
// Environment: KUBECONFIG, NAMESPACE, POD (containers "main", printing
// line-1..line-5 then idling, and "echo", a TCP echo server on ECHO_PORT),
// RUN (a name for this run's directories).
import * as k8s from '@kubernetes/client-node';
import tar from 'tar-fs';
import { createHash } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { Readable, Writable } from 'node:stream';

const { NAMESPACE: ns, POD: pod, ECHO_PORT: echoPort, RUN: run } = process.env;
const kc = new k8s.KubeConfig();
kc.loadFromDefault();

// stepTimeout bounds each step: a hang is a failure, never a wait.
const stepTimeout = 60_000;

function withTimeout(name, promise) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${name}: no answer within ${stepTimeout} ms`)), stepTimeout);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

// collect is a Writable keeping what it is given.
function collect() {
  const chunks = [];
  const w = new Writable({
    write(chunk, _enc, cb) {
      chunks.push(Buffer.from(chunk));
      cb();
    },
  });
  w.bytes = () => Buffer.concat(chunks);
  return w;
}

// exec runs command in container as the hooks do, resolving with the
// status the server sent; a stream that closes without one rejects.
function exec(container, command, { stdin = null, stdout = null, stderr = null } = {}) {
  return withTimeout(`exec ${command.join(' ')}`, new Promise((resolve, reject) => {
    new k8s.Exec(kc)
      .exec(ns, pod, container, command, stdout, stderr, stdin, false, (status) => resolve(status))
      .then((ws) => ws.on('close', (code, reason) => reject(new Error(`closed without a status: ${code} ${reason}`))))
      .catch(reject);
  }));
}

// outcome is what a status says, without what differs between servers.
function outcome(status) {
  const code = status?.details?.causes?.find((c) => c.reason === 'ExitCode')?.message;
  return { status: status?.status, reason: status?.reason ?? null, exitCode: code === undefined ? 0 : Number(code) };
}

const sha256 = (b) => createHash('sha256').update(b).digest('hex');

// deterministic is n bytes that are the same in every run.
function deterministic(n, seed) {
  const out = Buffer.alloc(n);
  let block = Buffer.from(seed);
  for (let off = 0; off < n; off += 32) {
    block = createHash('sha256').update(block).digest();
    block.copy(out, off);
  }
  return out;
}

// listing is `sha256sum` of every file under dir, sorted, paths relative:
// the hooks' own check that a copy arrived whole.
const listingScript = (dir) => `cd '${dir}' && find . -type f | sort | xargs sha256sum`;

async function stdinStep() {
  const sent = deterministic(1 << 20, 'stdin');
  const stdout = collect();
  const status = await exec('main', ['sh', '-c', 'cat; echo stdin-closed'], { stdin: Readable.from([sent]), stdout });
  const got = stdout.bytes();
  return { ...outcome(status), bytes: got.length, whole: sha256(got) === sha256(Buffer.concat([sent, Buffer.from('stdin-closed\n')])) };
}

async function exitCodeStep() {
  const stdout = collect();
  const stderr = collect();
  const status = await exec('main', ['sh', '-c', 'echo out; echo err >&2; exit 3'], { stdout, stderr });
  return { ...outcome(status), stdout: stdout.bytes().toString(), stderr: stderr.bytes().toString() };
}

async function copySteps() {
  const local = fs.mkdtempSync(path.join(os.tmpdir(), 'nodeclient-'));
  try {
    const src = path.join(local, 'src');
    fs.mkdirSync(path.join(src, 'sub'), { recursive: true });
    fs.writeFileSync(path.join(src, 'a.txt'), 'hello from the runner\n');
    fs.writeFileSync(path.join(src, 'sub', 'b.bin'), deterministic(300 << 10, 'b.bin'));
    const remote = `/tmp/nodeclient-${run}`;
    const mkdir = await exec('main', ['mkdir', '-p', remote], { stderr: collect() });
    const toPod = await exec('main', ['tar', 'xf', '-', '-C', remote], { stdin: tar.pack(src), stderr: collect() });
    const podListing = collect();
    await exec('main', ['sh', '-c', listingScript(remote)], { stdout: podListing });
    const back = path.join(local, 'back');
    const extract = tar.extract(back);
    const extracted = new Promise((resolve, reject) => {
      extract.on('finish', resolve);
      extract.on('error', reject);
    });
    const fromPod = await exec('main', ['tar', 'cf', '-', '-C', '/tmp', `nodeclient-${run}`], { stdout: extract, stderr: collect() });
    await withTimeout('tar extract', extracted);
    const localListing = execFileSync('sh', ['-c', listingScript(path.join(back, `nodeclient-${run}`))]).toString();
    return {
      mkdir: outcome(mkdir), toPod: outcome(toPod), fromPod: outcome(fromPod),
      podListing: podListing.bytes().toString(), backListing: localListing,
      sourceListing: execFileSync('sh', ['-c', listingScript(src)]).toString(),
    };
  } finally {
    fs.rmSync(local, { recursive: true, force: true });
  }
}

async function watchStep() {
  let controller;
  const first = new Promise((resolve, reject) => {
    new k8s.Watch(kc)
      .watch(`/api/v1/namespaces/${ns}/pods`, { fieldSelector: `metadata.name=${pod}` },
        (type, obj) => resolve({ type, name: obj.metadata.name }),
        (err) => reject(err ?? new Error('watch ended before an event')))
      .then((c) => { controller = c; })
      .catch(reject);
  });
  try {
    return await withTimeout('watch', first);
  } finally {
    controller?.abort();
  }
}

async function logStep() {
  const lines = [];
  let controller;
  const five = new Promise((resolve, reject) => {
    let rest = '';
    const out = new Writable({
      write(chunk, _enc, cb) {
        rest += chunk.toString();
        const parts = rest.split('\n');
        rest = parts.pop();
        lines.push(...parts);
        if (lines.length >= 5) resolve(lines.slice(0, 5));
        cb();
      },
    });
    new k8s.Log(kc).log(ns, pod, 'main', out, { follow: true })
      .then((c) => { controller = c; })
      .catch(reject);
  });
  try {
    return { followed: await withTimeout('log follow', five) };
  } finally {
    controller?.abort();
  }
}

async function portForwardStep() {
  const forward = new k8s.PortForward(kc);
  const server = net.createServer((socket) => {
    forward.portForward(ns, pod, [Number(echoPort)], socket, null, socket).catch((err) => socket.destroy(err));
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  try {
    const sent = deterministic(256 << 10, 'portforward');
    const echoed = await withTimeout('port-forward', new Promise((resolve, reject) => {
      const got = [];
      let n = 0;
      const c = net.connect(server.address().port, '127.0.0.1', () => c.write(sent));
      c.on('data', (d) => {
        got.push(d);
        n += d.length;
        if (n >= sent.length) {
          c.end();
          resolve(Buffer.concat(got));
        }
      });
      c.on('error', reject);
      c.on('close', () => reject(new Error(`closed after ${n} of ${sent.length} bytes`)));
    }));
    return { bytes: echoed.length, whole: sha256(echoed) === sha256(sent) };
  } finally {
    server.close();
  }
}

const result = {};
for (const [name, step] of Object.entries({
  stdin: stdinStep, exitCode: exitCodeStep, copy: copySteps, watch: watchStep, logs: logStep, portForward: portForwardStep,
})) {
  try {
    result[name] = await step();
  } catch (err) {
    result[name] = { error: String(err?.message ?? err) };
  }
}
process.stdout.write(JSON.stringify(result, null, 2) + '\n');
// Open keep-alive sockets must not keep the program alive.
process.exit(0);
