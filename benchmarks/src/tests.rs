//! Invariant tests: the written files are parsed back (EDN with the `edn-format` crate, CSV by hand)
//! and every number in `truth.json` is recomputed from them, never copied from the generator.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::path::{Path, PathBuf};

use edn_format::Value as Edn;
use serde_json::Value;

use crate::gen::{self, Config};
use crate::rng::Rng;
use crate::scale::Scale;
use crate::time;

fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("mentat-gen-test-{}-{name}", std::process::id()));
    let _ = fs::remove_dir_all(&d);
    d
}

fn custom(users: u64, issues: u64, labels: u64, seed: u64, batch: u64) -> Config {
    Config { scale: Scale { name: "custom".into(), users, issues, labels }, seed, batch }
}

fn kw(v: &Edn) -> String {
    match v {
        Edn::Keyword(k) => match k.namespace() {
            Some(ns) => format!(":{ns}/{}", k.name()),
            None => format!(":{}", k.name()),
        },
        other => panic!("not a keyword: {other:?}"),
    }
}

fn string(v: &Edn) -> String {
    match v {
        Edn::String(s) => s.clone(),
        other => panic!("not a string: {other:?}"),
    }
}

/// A lookup ref `[:attr "value"]` as (attr, value).
fn lookup_ref(v: &Edn) -> (String, String) {
    match v {
        Edn::Vector(items) if items.len() == 2 => (kw(&items[0]), string(&items[1])),
        other => panic!("not a lookup ref: {other:?}"),
    }
}

fn sorted_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    files
}

/// All (relative path, bytes) of a directory tree.
fn tree(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(dir).unwrap().to_string_lossy().into_owned();
                out.insert(rel, fs::read(&p).unwrap());
            }
        }
    }
    out
}

fn csv_rows(path: &Path) -> Vec<Vec<String>> {
    let text = fs::read_to_string(path).unwrap();
    text.lines().skip(1).map(|l| l.split(',').map(str::to_string).collect()).collect()
}

/// One issue as read back from the EDN transaction files.
#[derive(Debug, Clone)]
struct ParsedIssue {
    title: String,
    state: String,
    priority: i64,
    assignee: String,
    reporter: String,
    created_ms: i64,
    labels: Vec<String>,
}

/// What the transaction files say, parsed independently of the generator.
struct Parsed {
    files: usize,
    max_items: usize,
    user_names: HashMap<String, String>,
    labels: BTreeSet<String>,
    issues: Vec<ParsedIssue>,
    datoms: u64,
}

fn parse_tx_files(out: &Path) -> Parsed {
    let mut p = Parsed {
        files: 0,
        max_items: 0,
        user_names: HashMap::new(),
        labels: BTreeSet::new(),
        issues: Vec::new(),
        datoms: 0,
    };
    for f in sorted_files(&out.join("tx")) {
        p.files += 1;
        let text = fs::read_to_string(&f).unwrap();
        let Edn::Vector(items) = edn_format::parse_str(&text).unwrap() else {
            panic!("{} is not one EDN vector", f.display());
        };
        p.max_items = p.max_items.max(items.len());
        for item in items {
            let Edn::Map(m) = item else { panic!("not a map") };
            let m: HashMap<String, Edn> = m.into_iter().map(|(k, v)| (kw(&k), v)).collect();
            for (k, v) in &m {
                p.datoms += match (k.as_str(), v) {
                    (":issue/label", Edn::Vector(refs)) => refs.len() as u64,
                    _ => 1,
                };
            }
            if let Some(e) = m.get(":user/email") {
                assert!(p.issues.is_empty(), "users come before issues");
                p.user_names.insert(string(e), string(&m[":user/name"]));
            } else if let Some(n) = m.get(":label/name") {
                assert!(p.issues.is_empty(), "labels come before issues");
                p.labels.insert(string(n));
            } else {
                let (a_attr, assignee) = lookup_ref(&m[":issue/assignee"]);
                let (r_attr, reporter) = lookup_ref(&m[":issue/reporter"]);
                assert_eq!(a_attr, ":user/email");
                assert_eq!(r_attr, ":user/email");
                let labels: Vec<String> = match m.get(":issue/label") {
                    None => Vec::new(),
                    Some(Edn::Vector(refs)) => refs
                        .iter()
                        .map(|r| {
                            let (attr, name) = lookup_ref(r);
                            assert_eq!(attr, ":label/name");
                            name
                        })
                        .collect(),
                    Some(other) => panic!("labels not a vector: {other:?}"),
                };
                let Edn::Inst(created) = &m[":issue/created-at"] else { panic!("created-at not an inst") };
                let Edn::Integer(priority) = m[":issue/priority"] else { panic!("priority not an integer") };
                assert_eq!(m.len(), 6 + usize::from(!labels.is_empty()));
                p.issues.push(ParsedIssue {
                    title: string(&m[":issue/title"]),
                    state: kw(&m[":issue/state"]),
                    priority,
                    assignee,
                    reporter,
                    created_ms: created.timestamp_millis(),
                    labels,
                });
            }
        }
    }
    p
}

#[test]
fn time_fields_match_the_calendar() {
    assert_eq!(time::fields(0), (1, 1, 0, 0));
    // 31 days of January + 28 of February = 59 days: March 1st.
    assert_eq!(time::fields(59 * 1440), (3, 1, 0, 0));
    assert_eq!(time::fields(59 * 1440 - 1), (2, 28, 23, 59));
    assert_eq!(time::fields(365 * 1440 - 1), (12, 31, 23, 59));
    assert_eq!(time::epoch_ms(0), 1_735_689_600_000);
    assert_eq!(time::edn_inst(62 * 1440 + 5 * 60 + 6), "#inst \"2025-03-04T05:06:00.000-00:00\"");
    // An independent parser agrees on every day boundary of the year.
    for day in 0..365u64 {
        let minute = day * 1440 + 17;
        let Edn::Inst(dt) = edn_format::parse_str(&time::edn_inst(minute)).unwrap() else { panic!() };
        assert_eq!(dt.timestamp_millis(), time::epoch_ms(minute));
    }
}

#[test]
fn rng_is_in_range_and_roughly_uniform() {
    let mut r = Rng::new(7, 1);
    let mut hist = [0u32; 5];
    for _ in 0..50_000 {
        hist[r.below(5) as usize] += 1;
    }
    for h in hist {
        assert!((9_500..10_500).contains(&h), "{hist:?}");
    }
    let d = r.distinct(10, 10);
    assert_eq!(d.iter().collect::<BTreeSet<_>>().len(), 10);
    assert_ne!(Rng::new(7, 1).next_u64(), Rng::new(7, 2).next_u64());
    assert_ne!(Rng::new(7, 1).next_u64(), Rng::new(8, 1).next_u64());
}

#[test]
fn schema_matches_the_workload() {
    let Edn::Vector(attrs) = edn_format::parse_str(&gen::schema_edn()).unwrap() else { panic!() };
    assert_eq!(attrs.len(), 10);
    let mut by_ident = HashMap::new();
    for a in attrs {
        let Edn::Map(m) = a else { panic!() };
        let m: HashMap<String, Edn> = m.into_iter().map(|(k, v)| (kw(&k), v)).collect();
        by_ident.insert(kw(&m[":db/ident"]), m);
    }
    let email = &by_ident[":user/email"];
    assert_eq!(kw(&email[":db/unique"]), ":db.unique/identity");
    assert_eq!(kw(&email[":db/valueType"]), ":db.type/string");
    let label = &by_ident[":issue/label"];
    assert_eq!(kw(&label[":db/cardinality"]), ":db.cardinality/many");
    assert_eq!(kw(&label[":db/valueType"]), ":db.type/ref");
    assert_eq!(label[":db/index"], Edn::Boolean(true));
    let title = &by_ident[":issue/title"];
    assert!(!title.contains_key(":db/unique"));
    assert!(!title.contains_key(":db/index"));
    assert_eq!(kw(&by_ident[":issue/created-at"][":db/valueType"]), ":db.type/instant");
    assert_eq!(kw(&by_ident[":issue/state"][":db/valueType"]), ":db.type/keyword");
    assert_eq!(kw(&by_ident[":label/name"][":db/unique"]), ":db.unique/identity");
}

#[test]
fn written_files_agree_with_truth() {
    let out = temp_dir("invariants");
    // 2,345 issues in batches of 100: 24 issue files, 2 history batches (117 = 100 + 17).
    let truth = gen::generate(&custom(30, 2_345, 7, 99, 100), &out).unwrap();
    let p = parse_tx_files(&out);

    // Files and batching: 1 user file, 1 label file, 24 issue files.
    assert_eq!(p.files, 26);
    assert_eq!(truth["tx_files"]["count"], 26);
    assert_eq!(truth["tx_files"]["last_initial"], 25);
    assert!(p.max_items <= 100);
    assert_eq!(p.user_names.len(), 30);
    assert_eq!(p.user_names["user29@example.com"], "User 29");
    assert_eq!(p.labels.len(), 7);
    assert_eq!(p.issues.len(), 2_345);

    // Value shapes.
    let states: BTreeSet<&str> =
        [":state/open", ":state/in-progress", ":state/closed", ":state/resolved", ":state/reopened"].into();
    let mut label_refs = 0u64;
    let mut per_label_count = [0u32; 4];
    for (idx, i) in p.issues.iter().enumerate() {
        assert!(i.title.starts_with(&format!("Issue {idx}: ")), "{}", i.title);
        assert!(states.contains(i.state.as_str()));
        assert!((1..=5).contains(&i.priority));
        assert!(p.user_names.contains_key(&i.assignee));
        assert!(p.user_names.contains_key(&i.reporter));
        assert!(i.labels.len() <= 3);
        assert_eq!(i.labels.iter().collect::<BTreeSet<_>>().len(), i.labels.len());
        assert!(i.labels.iter().all(|l| p.labels.contains(l)));
        assert!((1_735_689_600_000..1_767_225_600_000).contains(&i.created_ms));
        assert_eq!(i.created_ms % 60_000, 0);
        label_refs += i.labels.len() as u64;
        per_label_count[i.labels.len()] += 1;
    }
    // Every label count 0..=3 occurs.
    assert!(per_label_count.iter().all(|&c| c > 400), "{per_label_count:?}");

    // Datoms: what the files assert equals the formula and the truth.
    assert_eq!(p.datoms, 2 * 30 + 7 + 6 * 2_345 + label_refs);
    assert_eq!(truth["datoms"]["initial"], p.datoms);
    assert_eq!(truth["datoms"]["label_refs"], label_refs);

    // History: 5% of 2,345 = 117.25 -> 117 updates, each to a different state, each issue at most once.
    let title_idx: HashMap<&str, usize> = p.issues.iter().enumerate().map(|(i, x)| (x.title.as_str(), i)).collect();
    let hist_files = sorted_files(&out.join("hist"));
    assert_eq!(hist_files.len(), 2);
    let mut state: Vec<String> = p.issues.iter().map(|i| i.state.clone()).collect();
    let mut seen = BTreeSet::new();
    let mut last_batch = BTreeSet::new();
    let mut n_updates = 0;
    let mut batch_of: HashMap<usize, u64> = HashMap::new();
    for (b, f) in hist_files.iter().enumerate() {
        last_batch.clear();
        for row in csv_rows(f) {
            let idx = title_idx[row[0].as_str()];
            assert!(seen.insert(idx), "issue {idx} updated twice");
            assert_ne!(state[idx], row[1]);
            assert!(states.contains(row[1].as_str()));
            state[idx] = row[1].clone();
            last_batch.insert(idx as u64);
            batch_of.insert(idx, b as u64);
            n_updates += 1;
        }
    }
    assert_eq!(n_updates, 117);
    assert_eq!(truth["history"]["updates"], 117);
    assert_eq!(truth["history"]["batches"], 2);
    assert_eq!(truth["datoms"]["final"], p.datoms + 2 * 117);
    assert_eq!(truth["since"]["count"], 17);
    assert_eq!(truth["since"]["history_batches_before_basis"], 1);
    let since: BTreeSet<u64> =
        truth["since"]["issue_idxs"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();
    assert_eq!(since, last_batch);

    // history.csv says the same as hist/*.csv.
    let hist_rows = csv_rows(&out.join("history.csv"));
    assert_eq!(hist_rows.len(), 117);
    for row in &hist_rows {
        let idx: usize = row[0].parse().unwrap();
        assert_eq!(state[idx], row[2]);
    }

    // Per-state counts and q4, initial and final.
    let count = |states_of: &[String], s: &str| states_of.iter().filter(|x| *x == s).count();
    let initial: Vec<String> = p.issues.iter().map(|i| i.state.clone()).collect();
    for s in &states {
        assert_eq!(truth["state_counts"]["initial"][*s], count(&initial, s) as u64);
        assert_eq!(truth["state_counts"]["final"][*s], count(&state, s) as u64);
    }
    let open_p4 =
        |st: &[String]| p.issues.iter().zip(st).filter(|(i, s)| *s == ":state/open" && i.priority >= 4).count() as u64;
    assert_eq!(truth["open_priority_ge_4"]["initial"], open_p4(&initial));
    assert_eq!(truth["open_priority_ge_4"]["final"], open_p4(&state));

    // Probe users: every assigned issue, with initial and final state.
    let probes = truth["probe_users"].as_array().unwrap();
    assert_eq!(probes.len(), 5);
    for pu in probes {
        let email = pu["email"].as_str().unwrap();
        assert_eq!(pu["name"].as_str().unwrap(), p.user_names[email]);
        let expected: Vec<(u64, String, String, String)> = p
            .issues
            .iter()
            .enumerate()
            .filter(|(_, i)| i.assignee == email)
            .map(|(idx, i)| (idx as u64, i.title.clone(), i.state.clone(), state[idx].clone()))
            .collect();
        assert!(!expected.is_empty());
        let got: Vec<(u64, String, String, String)> = pu["issues"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["idx"].as_u64().unwrap(),
                    r["title"].as_str().unwrap().to_string(),
                    r["initial_state"].as_str().unwrap().to_string(),
                    r["final_state"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        assert_eq!(got, expected);
    }

    // Probe issues: pull contents in the final state.
    let pulls = truth["probe_issues"].as_array().unwrap();
    // Five drawn at random plus one that gets a history update (unless it was among the five).
    assert!((5..=6).contains(&pulls.len()));
    assert!(pulls.iter().any(|pi| pi["state"] != pi["initial_state"]));
    for pi in pulls {
        let idx = pi["idx"].as_u64().unwrap() as usize;
        let i = &p.issues[idx];
        assert_eq!(pi["title"], i.title.as_str());
        assert_eq!(pi["state"], state[idx].as_str());
        assert_eq!(pi["initial_state"], i.state.as_str());
        assert_eq!(pi["history_batch"], serde_json::json!(batch_of.get(&idx)));
        assert_eq!(pi["priority"], i.priority);
        assert_eq!(pi["assignee_email"], i.assignee.as_str());
        assert_eq!(pi["reporter_email"], i.reporter.as_str());
        assert_eq!(pi["created_at_ms"], i.created_ms);
        let mut labels = i.labels.clone();
        labels.sort();
        assert_eq!(pi["labels"], serde_json::json!(labels));
    }

    // Input bindings: 30 users only, so all 30 distinct emails, with their names.
    let bindings = truth["input_bindings"].as_array().unwrap();
    assert_eq!(bindings.len(), 30);
    let emails: BTreeSet<&str> = bindings
        .iter()
        .map(|b| {
            let e = b["email"].as_str().unwrap();
            assert_eq!(b["name"].as_str().unwrap(), p.user_names[e]);
            e
        })
        .collect();
    assert_eq!(emails.len(), 30);

    // The relational copies hold the same data as the transactions.
    let issue_rows = csv_rows(&out.join("issues.csv"));
    assert_eq!(issue_rows.len(), 2_345);
    let mut csv_label_refs: HashMap<usize, Vec<String>> = HashMap::new();
    for row in csv_rows(&out.join("issue_labels.csv")) {
        csv_label_refs.entry(row[0].parse().unwrap()).or_default().push(row[1].clone());
    }
    for (idx, row) in issue_rows.iter().enumerate() {
        let i = &p.issues[idx];
        assert_eq!(row.len(), 7);
        assert_eq!(row[0], idx.to_string());
        assert_eq!(row[1], i.title);
        assert_eq!(row[2], i.state);
        assert_eq!(row[3], i.priority.to_string());
        assert_eq!(row[4], i.assignee);
        assert_eq!(row[5], i.reporter);
        let Edn::Inst(dt) = edn_format::parse_str(&format!("#inst \"{}Z\"", row[6].replace(' ', "T"))).unwrap() else {
            panic!()
        };
        assert_eq!(dt.timestamp_millis(), i.created_ms);
        let mut from_csv = csv_label_refs.remove(&idx).unwrap_or_default();
        let mut from_edn = i.labels.clone();
        from_csv.sort();
        from_edn.sort();
        assert_eq!(from_csv, from_edn);
    }
    assert_eq!(csv_rows(&out.join("users.csv")).len(), 30);
    assert_eq!(csv_rows(&out.join("labels.csv")).len(), 7);
    fs::remove_dir_all(&out).unwrap();
}

#[test]
fn same_seed_same_bytes_other_seed_other_data() {
    let (a, b, c) = (temp_dir("det-a"), temp_dir("det-b"), temp_dir("det-c"));
    gen::generate(&custom(50, 3_000, 11, 42, 500), &a).unwrap();
    gen::generate(&custom(50, 3_000, 11, 42, 500), &b).unwrap();
    gen::generate(&custom(50, 3_000, 11, 43, 500), &c).unwrap();
    let (ta, tb, tc) = (tree(&a), tree(&b), tree(&c));
    assert!(ta.len() > 10);
    assert_eq!(ta.keys().collect::<Vec<_>>(), tb.keys().collect::<Vec<_>>());
    for (k, v) in &ta {
        assert!(v == &tb[k], "{k} differs between two runs with one seed");
    }
    assert_ne!(ta["issues.csv"], tc["issues.csv"]);
    assert_eq!(ta["users.csv"], tc["users.csv"]);
    // A rerun into a used directory leaves no stale transaction file behind.
    gen::generate(&custom(50, 600, 11, 42, 500), &a).unwrap();
    assert_eq!(sorted_files(&a.join("tx")).len(), 1 + 1 + 2);
    for d in [a, b, c] {
        fs::remove_dir_all(d).unwrap();
    }
}

#[test]
fn xs_has_the_workload_shape() {
    let out = temp_dir("xs");
    let cfg = Config { scale: Scale::named("xs").unwrap(), seed: 42, batch: 500 };
    let truth: Value = gen::generate(&cfg, &out).unwrap();
    // 1 user file, 1 label file, 26 issue files; 650 updates in 2 batches (500 + 150).
    assert_eq!(truth["tx_files"]["count"], 28);
    assert_eq!(truth["history"]["updates"], 650);
    assert_eq!(truth["history"]["batches"], 2);
    assert_eq!(truth["since"]["count"], 150);
    // 0..=3 labels uniform: 1.5 per issue on average, so about 0.1M datoms in all.
    let refs = truth["datoms"]["label_refs"].as_u64().unwrap();
    assert!((18_500..20_500).contains(&refs), "{refs}");
    let initial = truth["datoms"]["initial"].as_u64().unwrap();
    assert!((95_000..100_000).contains(&initial), "{initial}");
    // Uniform states: each about 2,600 of 13,000.
    for (_, c) in truth["state_counts"]["initial"].as_object().unwrap() {
        assert!((2_400..2_800).contains(&c.as_u64().unwrap()), "{c}");
    }
    assert_eq!(truth["input_bindings"].as_array().unwrap().len(), 100);
    let on_disk: Value = serde_json::from_str(&fs::read_to_string(out.join("truth.json")).unwrap()).unwrap();
    assert_eq!(on_disk, truth);
    fs::remove_dir_all(&out).unwrap();
}
