#!/usr/bin/env node
// Summarises a `node --cpu-prof` profile: the functions with the most self time, then the most inclusive
// time (each function counted once per sample). Used for docs/performance.md (issue 21).
//
//   node scripts/cpuprofile-top.mjs FILE.cpuprofile [N=25] [--last SECONDS] [--per COUNT]
//
// --last keeps only the final SECONDS of the profile (e.g. a bench's flood window); --per divides the
// times by COUNT (e.g. tasks) and prints ms per unit.
import { readFileSync } from 'node:fs';

const args = process.argv.slice(2);
const opt = (name) => {
  const i = args.indexOf(name);
  if (i < 0) return undefined;
  const v = Number(args[i + 1]);
  args.splice(i, 2);
  return v;
};
const lastSeconds = opt('--last');
const per = opt('--per') ?? 1;
const [file, top = '25'] = args;
if (!file) {
  console.error('usage: cpuprofile-top.mjs FILE.cpuprofile [N] [--last SECONDS] [--per COUNT]');
  process.exit(2);
}
const profile = JSON.parse(readFileSync(file, 'utf8'));
const byId = new Map(profile.nodes.map((n) => [n.id, n]));
const parent = new Map();
for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
const label = (id) => {
  const f = byId.get(id).callFrame;
  return `${f.functionName || '(anonymous)'} ${f.url.split('/').slice(-2).join('/')}:${f.lineNumber + 1}`;
};

let t = profile.startTime;
const stamps = profile.timeDeltas.map((d) => {
  t += d;
  return t;
});
const from = lastSeconds === undefined ? -Infinity : stamps[stamps.length - 1] - lastSeconds * 1e6;
const self = new Map();
const inclusive = new Map();
let total = 0;
for (let i = 0; i < profile.samples.length; i++) {
  if (stamps[i] < from) continue;
  const d = profile.timeDeltas[i] ?? 0;
  total += d;
  const id = profile.samples[i];
  self.set(label(id), (self.get(label(id)) ?? 0) + d);
  const seen = new Set();
  for (let cur = id; cur !== undefined; cur = parent.get(cur)) {
    const k = label(cur);
    if (seen.has(k)) continue;
    seen.add(k);
    inclusive.set(k, (inclusive.get(k) ?? 0) + d);
  }
}
const unit = per === 1 ? 'ms' : 'ms/unit';
const show = (title, m) => {
  console.log(`--- ${title} (${unit}, share of ${(total / 1e3).toFixed(0)} ms sampled)`);
  for (const [k, v] of [...m].sort((a, b) => b[1] - a[1]).slice(0, Number(top)))
    console.log(
      `${(v / 1e3 / per).toFixed(per === 1 ? 0 : 2).padStart(8)} ${((100 * v) / total).toFixed(1).padStart(5)}%  ${k}`,
    );
};
show('self', self);
show('inclusive', inclusive);
