//! The issue-tracker workload as the native driver sees it: what it reads from the generator's output of one
//! scale (`truth.json`, `labels.csv`), the Datalog texts the Python suite sends, the writable issues, and the
//! scrambled Zipfian key chooser of `benchmarks/py/suite/workload.py`.

use std::collections::HashSet;
use std::path::Path;

use serde_json::Value;

use crate::Res;

/// The five states an issue can be in (`workload.STATES`).
pub const STATES: [&str; 5] =
    [":state/open", ":state/in-progress", ":state/closed", ":state/resolved", ":state/reopened"];

/// `workload.Q1`: a user's name by email.
pub const Q1: &str = "[:find ?e ?name :in $ ?email :where [?e :user/email ?email] [?e :user/name ?name]]";
/// `workload.Q2`: a user's assigned issues with title and state.
pub const Q2: &str = "[:find ?i ?title ?state :in $ ?email :where [?u :user/email ?email] [?i :issue/assignee ?u] \
                      [?i :issue/title ?title] [?i :issue/state ?state]]";
/// `workload.QREAD`: the point read of update_heavy, an issue's state.
pub const QREAD: &str = "[:find ?s :in $ ?e :where [?e :issue/state ?s]]";
/// Every issue's entity and title: the map from the generator's issue index ("Issue N: ...") to entity ids.
pub const QTITLES_ALL: &str = "[:find ?e ?t :where [?e :issue/title ?t]]";
/// The final check of the writes: the states of many issues at once.
pub const QSTATES: &str = "[:find ?e ?s :in $ [?e ...] :where [?e :issue/state ?s]]";
/// The final check of write_mixed's label writes: the label names of many issues at once.
pub const QLABELS: &str = "[:find ?e ?n :in $ [?e ...] :where [?e :issue/label ?l] [?l :label/name ?n]]";

/// The generator's issue index in a title such as `Issue 8220: ui glitch` (`base.TITLE_IDX`).
pub fn title_idx(title: &str) -> Option<usize> {
    let rest = title.strip_prefix("Issue ")?;
    let end = rest.find(':')?;
    rest[..end].parse().ok()
}

/// Issue index -> entity id, and back, from `(entity, title)` rows of a store: every one of the workload's
/// `n_issues` issues must be found (an error names `store` otherwise).
pub type IssueIds = (Vec<i64>, std::collections::HashMap<i64, usize>);

pub fn issues_by_title(
    rows: impl IntoIterator<Item = (i64, String)>,
    n_issues: usize,
    store: &str,
) -> Result<IssueIds, String> {
    let mut entid = vec![0i64; n_issues];
    let mut by_e = std::collections::HashMap::with_capacity(n_issues);
    for (e, t) in rows {
        if let Some(i) = title_idx(&t).filter(|&i| i < n_issues) {
            entid[i] = e;
            by_e.insert(e, i);
        }
    }
    if by_e.len() != n_issues {
        return Err(format!("{store}: {} issues found by title, truth.json has {n_issues}", by_e.len()));
    }
    Ok((entid, by_e))
}

/// A probe user: its email, name, and the (title, final state) of every issue assigned to it. The writers never
/// touch these issues, so q1 and q2 about a probe user have one right answer while writes run.
pub struct Probe {
    pub email: String,
    pub name: String,
    pub issues: Vec<(String, String)>,
}

pub struct Workload {
    pub scale: String,
    pub n_issues: usize,
    /// Issue indexes the writers may change (every issue but the probe users' and the probe issues').
    pub writable: Vec<usize>,
    pub probes: Vec<Probe>,
    pub labels: Vec<String>,
}

impl Workload {
    /// Reads `truth.json` and `labels.csv` from the generator's output directory of one scale.
    pub fn read(dir: &Path) -> Res<Workload> {
        let text = std::fs::read_to_string(dir.join("truth.json"))
            .map_err(|e| format!("{}: {e}", dir.join("truth.json").display()))?;
        let t: Value = serde_json::from_str(&text)?;
        let n_issues = t["entities"]["issues"].as_u64().ok_or("truth.json: no entities.issues")? as usize;
        let mut protected = HashSet::new();
        let mut probes = Vec::new();
        for p in t["probe_users"].as_array().ok_or("truth.json: no probe_users")? {
            let mut issues = Vec::new();
            for i in p["issues"].as_array().ok_or("truth.json: probe user without issues")? {
                protected.insert(i["idx"].as_u64().ok_or("probe issue without idx")? as usize);
                issues.push((
                    i["title"].as_str().unwrap_or_default().to_string(),
                    i["final_state"].as_str().unwrap_or_default().to_string(),
                ));
            }
            issues.sort();
            probes.push(Probe {
                email: p["email"].as_str().unwrap_or_default().to_string(),
                name: p["name"].as_str().unwrap_or_default().to_string(),
                issues,
            });
        }
        for p in t["probe_issues"].as_array().ok_or("truth.json: no probe_issues")? {
            protected.insert(p["idx"].as_u64().ok_or("probe issue without idx")? as usize);
        }
        let writable = (0..n_issues).filter(|i| !protected.contains(i)).collect();
        let csv = std::fs::read_to_string(dir.join("labels.csv"))?;
        let labels = csv
            .lines()
            .skip(1)
            .filter_map(|l| l.split_once(',').map(|(_, name)| name.trim().to_string()))
            .filter(|n| !n.is_empty())
            .collect::<Vec<_>>();
        if labels.is_empty() || probes.is_empty() {
            return Err("truth.json or labels.csv: no probe users or no labels".into());
        }
        Ok(Workload { scale: t["scale"].as_str().unwrap_or("?").to_string(), n_issues, writable, probes, labels })
    }
}

/// SplitMix64: a small seeded generator for the clients' draws (which key, update or read, which state).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [0, n).
    pub fn below(&mut self, n: usize) -> usize {
        ((self.next_u64() as u128 * n as u128) >> 64) as usize
    }
}

/// YCSB's scrambled Zipfian chooser (theta 0.99) over n items, as `workload.ScrambledZipf`: a Zipfian rank drawn
/// by inverting the cumulative weights, then hashed (FNV-1a 64 over its 8 little-endian bytes) onto an item, so
/// that the hot items are spread over the key space.
pub struct ScrambledZipf {
    cdf: Vec<f64>,
    rng: Rng,
}

impl ScrambledZipf {
    pub fn new(n: usize, theta: f64, seed: u64) -> ScrambledZipf {
        let mut cdf = Vec::with_capacity(n);
        let mut acc = 0.0;
        for r in 1..=n {
            acc += (r as f64).powf(-theta);
            cdf.push(acc);
        }
        for c in cdf.iter_mut() {
            *c /= acc;
        }
        ScrambledZipf { cdf, rng: Rng::new(seed) }
    }

    fn fnv(x: u64) -> u64 {
        let mut h: u64 = 0xCBF2_9CE4_8422_2325;
        for i in 0..8 {
            h ^= (x >> (8 * i)) & 0xFF;
            h = h.wrapping_mul(0x0100_0000_01B3);
        }
        h
    }

    /// One item in [0, n).
    pub fn sample(&mut self) -> usize {
        let u = self.rng.f64();
        let rank = self.cdf.partition_point(|&c| c < u).min(self.cdf.len() - 1);
        (Self::fnv(rank as u64) % self.cdf.len() as u64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn titles_give_their_index() {
        assert_eq!(title_idx("Issue 8220: ui glitch"), Some(8220));
        assert_eq!(title_idx("Issue 0: x"), Some(0));
        assert_eq!(title_idx("Bug 1: x"), None);
    }

    #[test]
    fn fnv_matches_the_python_chooser() {
        // workload.ScrambledZipf._fnv(np.array([0, 1, 12345])) in the Python suite
        assert_eq!(ScrambledZipf::fnv(0), 0xA8C7_F832_281A_39C5);
        assert_eq!(ScrambledZipf::fnv(1), 0x89CD_3129_1D2A_EFA4);
        assert_eq!(ScrambledZipf::fnv(12345), 0xE71E_B185_E2ED_CC4C);
    }

    #[test]
    fn zipf_is_skewed_and_in_range() {
        let mut z = ScrambledZipf::new(10_000, 0.99, 11);
        let mut counts = std::collections::HashMap::new();
        for _ in 0..100_000 {
            let k = z.sample();
            assert!(k < 10_000);
            *counts.entry(k).or_insert(0usize) += 1;
        }
        let top = counts.values().max().copied().unwrap();
        // the hottest item of a theta-0.99 Zipfian over 10,000 items draws about 10% of the samples
        assert!(top > 5_000, "{top}");
    }
}
