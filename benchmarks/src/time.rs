//! Minute-resolution instants within the year 2025 (UTC), formatted without a date library.

/// Minutes in 2025 (not a leap year).
pub const MINUTES_IN_2025: u64 = 365 * 24 * 60;

/// Unix time of 2025-01-01T00:00:00Z, in seconds.
pub const EPOCH_2025_SECS: i64 = 1_735_689_600;

const MONTH_DAYS: [u64; 12] = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];

/// Calendar fields (month 1..=12, day 1..=31, hour, minute) of `minute` minutes after 2025-01-01T00:00Z.
pub fn fields(minute: u64) -> (u64, u64, u64, u64) {
    assert!(minute < MINUTES_IN_2025, "minute {minute} is not in 2025");
    let mut day = minute / 1440;
    let in_day = minute % 1440;
    let mut month = 0;
    while day >= MONTH_DAYS[month] {
        day -= MONTH_DAYS[month];
        month += 1;
    }
    (month as u64 + 1, day + 1, in_day / 60, in_day % 60)
}

/// The EDN literal `#inst "2025-MM-DDTHH:MM:00.000-00:00"`.
pub fn edn_inst(minute: u64) -> String {
    let (mo, d, h, mi) = fields(minute);
    format!("#inst \"2025-{mo:02}-{d:02}T{h:02}:{mi:02}:00.000-00:00\"")
}

/// ISO 8601 UTC with milliseconds, `2025-MM-DDTHH:MM:00.000Z` (the form used in truth.json).
pub fn iso(minute: u64) -> String {
    let (mo, d, h, mi) = fields(minute);
    format!("2025-{mo:02}-{d:02}T{h:02}:{mi:02}:00.000Z")
}

/// The CSV form `2025-MM-DD HH:MM:00` (UTC), which DuckDB, SQLite and PostgreSQL all read as a timestamp.
pub fn csv(minute: u64) -> String {
    let (mo, d, h, mi) = fields(minute);
    format!("2025-{mo:02}-{d:02} {h:02}:{mi:02}:00")
}

/// Milliseconds since the Unix epoch.
pub fn epoch_ms(minute: u64) -> i64 {
    (EPOCH_2025_SECS + minute as i64 * 60) * 1000
}
