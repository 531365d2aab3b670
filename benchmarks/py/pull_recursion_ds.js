// DataScript's pull of the same chains and component trees as pull_bench.py's recursion cases, for a ratio
// measured in the same run. usage: node --stack-size=65500 pull_recursion_ds.js <path of node_modules/datascript>
const d = require(process.argv[2]);
const schema = {"n/next": {":db/valueType": ":db.type/ref"},
                "part/sub": {":db/valueType": ":db.type/ref", ":db/cardinality": ":db.cardinality/many", ":db/isComponent": true}};
const conn = d.create_conn(schema);
let heads = [];
for (let c = 0; c < 20; c++) {
  const tx = [];
  for (let i = 0; i < 5000; i++) {
    const m = {":db/id": -(i + 1), "n/name": `l${c}-${i}`};
    if (i + 1 < 5000) m["n/next"] = -(i + 2);
    tx.push(m);
  }
  const r = d.transact(conn, tx);
  heads.push(d.resolve_tempid(r.tempids, -1));
}
function tree(depth, label) {
  const m = {"part/name": label, "part/size": label.length};
  if (depth) m["part/sub"] = [0,1,2,3].map(k => tree(depth - 1, `${label}.${k}`));
  return m;
}
let roots = [];
for (let r = 0; r < 20; r++) {
  const t = tree(5, `r${r}`); t[":db/id"] = -1;
  const res = d.transact(conn, [t]);
  roots.push(d.resolve_tempid(res.tempids, -1));
}
const db = d.db(conn);
function time(name, f, n) {
  for (let i = 0; i < 3; i++) f();
  const ts = [];
  for (let i = 0; i < n; i++) { const t = process.hrtime.bigint(); f(); ts.push(Number(process.hrtime.bigint() - t) / 1e6); }
  ts.sort((a, b) => a - b);
  console.log(`| ${name} | ${ts[Math.floor(n / 2)].toFixed(2)} | ${ts[Math.floor(n * 0.95) - 1].toFixed(2)} |`);
}
let depth = 0;
try {
  let node = d.pull(db, '["n/name" {"n/next" ...}]', heads[3]);
  while (node) { depth++; node = node["n/next"]; }
  console.log("chain depth", depth);
} catch (e) { console.log("chain pull failed:", String(e).slice(0, 200)); }
let seed = 15;
const rnd = () => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed % 20; };
try { time("DataScript pull {:n/next ...} chain of 5,000", () => d.pull(db, '["n/name" {"n/next" ...}]', heads[rnd()]), 20); } catch (e) { console.log("failed", String(e).slice(0,200)); }
time("DataScript pull component tree named", () => d.pull(db, '["part/name" "part/sub"]', roots[rnd()]), 20);
time("DataScript pull component tree [*]", () => d.pull(db, '[*]', roots[rnd()]), 20);
const w = d.pull(db, '["part/name" "part/sub"]', roots[0]);
function count(n) { return 1 + (n["part/sub"] || []).reduce((a, x) => a + count(x), 0); }
console.log("tree size", count(w));
