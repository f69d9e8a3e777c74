// The `fairness` bench's workload on a real Slurm with accounting and priority/multifactor fair share
// (docs/performance.md "Fair share"; set-up in ./README.md). Three accounts a, b, c (fairshare 1:1:2)
// each keep 6 jobs pending: 1/2/4/8 GPUs drawn with the same generator and seed as bench/fair-sim.ts,
// running 2..10 minutes compressed `SCALE` times (12..60 s at 10x). Runs WALL_S seconds, then reads
// sacct and prints each account's share of the GPU-seconds and the GPUs busy after the first quarter.
//   SLURM_CONF=/tmp/fs-slurm/etc/slurm.conf node drive.mjs [WALL_S] [SCALE]
import { execFileSync } from 'node:child_process';

const WALL_S = Number(process.argv[2] ?? 1200);
const SCALE = Number(process.argv[3] ?? 10);
const GPUS = 8;
const ACCOUNTS = ['a', 'b', 'c'];
const TARGET = { a: 0.25, b: 0.25, c: 0.5 };
let x = 42 >>> 0;
const rnd = () => {
  x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
  return x / 2 ** 32;
};
const sh = (cmd, args) => execFileSync(cmd, args, { encoding: 'utf8' });
const t0 = Date.now();
let submitted = 0;
while (Date.now() - t0 < WALL_S * 1000) {
  const pending = sh('squeue', ['-h', '-t', 'PD', '-o', '%a']).split('\n').filter(Boolean);
  for (const a of ACCOUNTS) {
    for (let n = pending.filter((p) => p === a).length; n < 6; n++) {
      const gpus = [1, 2, 4, 8][Math.floor(rnd() * 4)];
      const seconds = Math.round((120 + Math.floor(rnd() * 97) * 5) / SCALE);
      sh('sbatch', [
        '-A',
        a,
        '-J',
        `fb-${a}`,
        '--gres',
        `gpu:${gpus}`,
        '-c',
        '1',
        '-t',
        '15',
        '-o',
        '/dev/null',
        '--wrap',
        `sleep ${seconds}`,
      ]);
      submitted++;
    }
  }
  await new Promise((r) => setTimeout(r, 300));
}
const end = Date.now();
const from = t0 + (end - t0) / 4;
const iso = (ms) => new Date(ms).toISOString().slice(0, 19);
const rows = sh('sacct', [
  '-X',
  '-a',
  '-P',
  '-n',
  '-S',
  iso(t0 - 60_000),
  '-o',
  'JobID,Account,Submit,Start,End,AllocTRES,State',
])
  .split('\n')
  .filter(Boolean);
const used = { a: 0, b: 0, c: 0 };
const waits8 = [];
let busy = 0;
// sacct prints local time; this VM runs in UTC.
const parse = (s) => (s === 'Unknown' || s === 'None' ? null : Date.parse(`${s}Z`));
for (const r of rows) {
  const [, account, submit, start, stop, tres] = r.split('|');
  if (!(account in used)) continue;
  const s = parse(start);
  if (s === null) continue;
  const e = Math.min(parse(stop) ?? end, end);
  const g = Number(/gres\/gpu=(\d+)/.exec(tres)?.[1] ?? 0);
  const inWindow = Math.max(0, e - Math.max(s, from)) / 1000;
  used[account] += g * inWindow;
  busy += g * inWindow;
  if (g === 8 && s >= from) waits8.push((((s - parse(submit)) / 1000) * SCALE) / 60);
}
const total = used.a + used.b + used.c;
waits8.sort((p, q) => p - q);
console.log(
  JSON.stringify(
    {
      wall_s: (end - t0) / 1000,
      scale: SCALE,
      submitted,
      shares: Object.fromEntries(ACCOUNTS.map((a) => [a, +(used[a] / total).toFixed(4)])),
      share_error_pct: Object.fromEntries(
        ACCOUNTS.map((a) => [a, +((used[a] / total / TARGET[a] - 1) * 100).toFixed(1)]),
      ),
      utilisation: +(busy / ((GPUS * (end - from)) / 1000)).toFixed(4),
      eight_gpu_wait_sim_min: { n: waits8.length, p50: waits8[waits8.length >> 1], max: waits8.at(-1) },
    },
    null,
    1,
  ),
);
