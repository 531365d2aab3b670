//! The workload's scales (see `shared/workload.md`).

/// Entity counts of one scale.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scale {
    /// The scale's name (`xs`, `s`, `m`, `l`, or `custom`).
    pub name: String,
    /// Number of users.
    pub users: u64,
    /// Number of issues.
    pub issues: u64,
    /// Number of labels.
    pub labels: u64,
}

impl Scale {
    /// The named scale of the workload, or `None` for an unknown name.
    pub fn named(name: &str) -> Option<Scale> {
        let (users, issues, labels) = match name {
            "xs" => (200, 13_000, 50),
            "s" => (1_600, 130_000, 200),
            "m" => (16_000, 1_300_000, 500),
            "l" => (160_000, 13_000_000, 1_000),
            _ => return None,
        };
        Some(Scale { name: name.to_string(), users, issues, labels })
    }

    /// Number of issues that get a history update: 5% of the issues, rounded to nearest.
    pub fn history_updates(&self) -> u64 {
        (self.issues * 5 + 50) / 100
    }
}
