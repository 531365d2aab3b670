// DataScript peer server: reads the generator's CSVs, builds the db, then answers JSON lines on stdin:
// {"op": "q", "query": "...", "inputs": [...], "db": "now"|"asof"|"since"} -> {"ok": true, "rows": [...]}
// {"op": "pull", "e": N} / {"op": "tx", "tx": [...]} / {"op": "history", "batches": [[[e, state], ...], ...]}
// Attribute names are JS strings ("user/email") as DataScript's JS API requires; state keywords are strings.
const fs = require("fs");
const readline = require("readline");
const d = require(process.env.DATASCRIPT_PATH || "datascript");

const dir = process.argv[2];
const csv = (name) => fs.readFileSync(`${dir}/${name}.csv`, "utf8").trim().split("\n").slice(1).map((l) => l.split(","));
const schema = {
  "user/email": { ":db/unique": ":db.unique/identity" },
  "label/name": { ":db/unique": ":db.unique/identity" },
  "issue/assignee": { ":db/valueType": ":db.type/ref" },
  "issue/reporter": { ":db/valueType": ":db.type/ref" },
  "issue/label": { ":db/valueType": ":db.type/ref", ":db/cardinality": ":db.cardinality/many" },
};
const TX0 = 536870912; // DataScript's tx0
let db, dbAsOf, sinceTx, lastInitialTx;
const t0 = Date.now();
{
  const users = csv("users"), labels = csv("labels"), issues = csv("issues"), il = csv("issue_labels");
  const uid = new Map(), lid = new Map();
  const datoms = [];
  users.forEach(([u, email, name], i) => { const e = i + 1; uid.set(email, e);
    datoms.push([e, "user/email", email, TX0 + 1], [e, "user/name", name, TX0 + 1]); });
  labels.forEach(([n, name], i) => { const e = users.length + 1 + i; lid.set(name, e); datoms.push([e, "label/name", name, TX0 + 1]); });
  const base = users.length + labels.length + 1;
  issues.forEach(([idx, title, state, prio, ae, re, ca], k) => {
    const e = base + Number(idx), tx = TX0 + 2 + Math.floor(k / 500);
    datoms.push([e, "issue/title", title, tx], [e, "issue/state", state, tx], [e, "issue/priority", Number(prio), tx],
      [e, "issue/assignee", uid.get(ae), tx], [e, "issue/reporter", uid.get(re), tx],
      [e, "issue/created-at", Date.parse(ca.replace(" ", "T") + "Z"), tx]);
  });
  il.forEach(([idx, lab]) => datoms.push([base + Number(idx), "issue/label", lid.get(lab), TX0 + 2 + Math.floor(Number(idx) / 500)]));
  db = d.init_db(datoms, schema);
  lastInitialTx = TX0 + 2 + Math.floor((issues.length - 1) / 500);
  dbAsOf = db; // DataScript keeps no history: the as-of db is the retained immutable value after the initial load
}
process.stdout.write(JSON.stringify({ ok: true, loaded_ms: Date.now() - t0 }) + "\n");

const rl = readline.createInterface({ input: process.stdin });
rl.on("line", (line) => {
  let out;
  try {
    const m = JSON.parse(line);
    if (m.op === "q") {
      const src = m.db === "asof" ? dbAsOf : m.db === "since" ? d.filter(db, (_db, datom) => datom.tx > sinceTx) : db;
      out = { ok: true, rows: d.q(m.query, src, ...(m.inputs || [])) };
    } else if (m.op === "pull") {
      out = { ok: true, rows: d.pull(db, "[*]", m.e) };
    } else if (m.op === "tx") {
      const conn = d.conn_from_db(db);
      const rep = d.transact(conn, m.tx);
      db = d.db(conn);
      out = { ok: true, n: rep.tx_data.length };
    } else if (m.op === "history") {
      let last = null;
      sinceTx = lastInitialTx;
      const conn = d.conn_from_db(db);
      m.batches.forEach((b, i) => {
        const rep = d.transact(conn, b.map(([e, s]) => [":db/add", e, "issue/state", s]));
        const tx = Math.abs(rep.tx_data[0].tx);
        if (i === m.since_after - 1) sinceTx = tx;
        last = tx;
      });
      db = d.db(conn);
      out = { ok: true, last };
    } else if (m.op === "mem") {
      out = { ok: true, rss: process.memoryUsage().rss };
    } else {
      out = { ok: false, error: "unknown op" };
    }
  } catch (e) {
    out = { ok: false, error: String(e && e.message || e) };
  }
  process.stdout.write(JSON.stringify(out) + "\n");
});
