// Times what @kubernetes/client-node pays to run an exec: ROUNDS execs of
// `true` in POD's main container, each on the new WebSocket connection
// client-node opens for it, from the call to the exit status; the first is
// a warm-up, left out. Prints the milliseconds as a JSON array. make bench
// runs it through the gateway and beside it (e2e/bench, nodeclient.go).
import * as k8s from '@kubernetes/client-node';
import { Writable } from 'node:stream';

const { NAMESPACE: ns, POD: pod, ROUNDS: rounds } = process.env;
const kc = new k8s.KubeConfig();
kc.loadFromDefault();
const sink = () => new Writable({ write(_c, _e, cb) { cb(); } });

function execTrue() {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('no exit status within 30 s')), 30_000);
    new k8s.Exec(kc)
      .exec(ns, pod, 'main', ['true'], sink(), null, null, false, (status) => {
        clearTimeout(timer);
        status?.status === 'Success' ? resolve() : reject(new Error(`status ${JSON.stringify(status)}`));
      })
      .catch((err) => { clearTimeout(timer); reject(err); });
  });
}

const took = [];
for (let i = 0; i <= Number(rounds); i++) {
  const start = performance.now();
  await execTrue();
  if (i > 0) took.push(performance.now() - start);
}
process.stdout.write(JSON.stringify(took) + '\n');
process.exit(0);
