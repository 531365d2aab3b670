// DataScript side of the differential tests (benchmarks/py/differential): one long-running node process that
// answers JSON lines on stdin, one line out per line in. DataScript's JS API names attributes by strings
// ("a/s0"), keeps keyword values as strings (":k/a") and takes query and pull texts as EDN.
//   {"op": "new", "schema": {...}}                       a fresh connection with that schema
//   {"op": "tx", "txs": [[form, ...], ...]}              each element its own transaction: [{ok, tempids}|{error}]
//   {"op": "q", "qs": [{"q": edn, "inputs": [...]}, ...]}  [{ok, r}|{error}] against the current db
//   {"op": "pull", "ps": [{"p": edn, "es": [eid, ...]}]}  pull_many of each: [{ok, r}|{error}]
//   {"op": "datoms"}                                     every current datom as [e, a, v]
const readline = require("readline");
const d = require(process.env.DATASCRIPT_PATH || "datascript");

let conn = d.create_conn({});
const err = (e) => String(e && e.message ? e.message : e).slice(0, 300);

function handle(m) {
  if (m.op === "new") {
    conn = d.create_conn(m.schema || {});
    return { ok: true };
  }
  if (m.op === "tx") {
    return {
      ok: true,
      r: m.txs.map((tx) => {
        try {
          const rep = d.transact(conn, tx);
          const t = {};
          for (const k of Object.keys(rep.tempids)) if (k !== ":db/current-tx") t[k] = rep.tempids[k];
          return { ok: true, tempids: t };
        } catch (e) {
          return { error: err(e) };
        }
      }),
    };
  }
  const db = d.db(conn);
  if (m.op === "q") {
    return {
      ok: true,
      r: m.qs.map((x) => {
        try {
          return { ok: true, r: d.q(x.q, db, ...(x.inputs || [])) };
        } catch (e) {
          return { error: err(e) };
        }
      }),
    };
  }
  if (m.op === "pull") {
    return {
      ok: true,
      r: m.ps.map((x) => {
        try {
          return { ok: true, r: d.pull_many(db, x.p, x.es) };
        } catch (e) {
          return { error: err(e) };
        }
      }),
    };
  }
  if (m.op === "datoms") {
    return { ok: true, r: d.datoms(db, ":eavt").map((x) => [x.e, x.a, x.v]) };
  }
  return { error: "unknown op " + m.op };
}

const rl = readline.createInterface({ input: process.stdin, terminal: false });
rl.on("line", (line) => {
  let out;
  try {
    out = handle(JSON.parse(line));
  } catch (e) {
    out = { error: err(e) };
  }
  process.stdout.write(JSON.stringify(out) + "\n");
});
process.stdout.write(JSON.stringify({ ok: true, ready: true }) + "\n");
